"""Reading memory files within bounds: a regular file only, no bigger than a card may
be, and within a time (issue 34).

A FIFO in place of a card blocks `open()` until a writer comes, forever; a file on a
network mount that stopped answering blocks `read()`; a card of a megabyte cost a
rebuild gigabytes. Every card and profile read by a scan, a check, a rebuild's catch-up
or the write path goes through `read_bounded`, which refuses the first two with a
message naming the file and stops waiting after ``MEMORY_FILE_READ_TIMEOUT`` seconds.

The size limit, ``MEMORY_MAX_CARD_BYTES`` (64 KiB), holds a fact card with room to
spare (a fact is a sentence; the longest extracted one is 400 characters, its evidence a
quote from one message) and is checked on every door: writing (`facts.storage.writer`),
reading (here), importing. A profile may be `PROFILE_FACTOR` times larger.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import stat
import threading
import time
from collections.abc import Iterator
from typing import Any

from django.conf import settings

PROFILE_FACTOR = 16


class ReadRefused(OSError):
    """A memory file that is not read: not a regular file, too large, or it did not
    answer in time. `message` says which and names nothing else (the caller names the
    file)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def max_card_bytes() -> int:
    return int(getattr(settings, "MEMORY_MAX_CARD_BYTES", 65536))


def read_timeout() -> float:
    return float(getattr(settings, "MEMORY_FILE_READ_TIMEOUT", 10.0))


def max_bytes(what: str = "card") -> int:
    """The bound of a card, or of a profile (`PROFILE_FACTOR` times a card's)."""
    return max_card_bytes() * (PROFILE_FACTOR if what == "profile" else 1)


def too_large(size: int, limit: int | None = None, *, what: str = "card") -> str | None:
    """The refusal for a `what` ("card" or "profile") of `size` bytes, or None when it
    fits."""
    limit = max_bytes(what) if limit is None else limit
    if size <= limit:
        return None
    setting = "MEMORY_MAX_CARD_BYTES" if what == "card" else f"{PROFILE_FACTOR} × MEMORY_MAX_CARD_BYTES"
    return f"the {what} is {size:,} bytes, over the limit of {limit:,} ({setting}): shorten it"


def read_bounded(path: str | os.PathLike[str], *, what: str = "card") -> bytes:
    """The bytes of the memory file `path`, or `ReadRefused`; FileNotFoundError as usual."""
    limit = max_bytes(what)
    seconds = read_timeout()
    if seconds <= 0:
        return _read(os.fspath(path), limit, what)
    if threading.current_thread() is threading.main_thread():
        with _alarm(seconds):
            return _read(os.fspath(path), limit, what)
    return _on_a_thread(os.fspath(path), limit, what, seconds)


def _read(path: str, limit: int, what: str) -> bytes:
    # O_NONBLOCK: a FIFO opens at once (with no writer) instead of waiting for one; it
    # changes nothing for a regular file.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ReadRefused(f"not a regular file ({_kind(st.st_mode)}): a {what} must be a plain file")
        if problem := too_large(st.st_size, limit, what=what):
            raise ReadRefused(problem)
        chunks = []
        left = limit + 1  # one byte more: a file that grew since the fstat is caught too
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if problem := too_large(len(data), limit, what=what):
            raise ReadRefused(problem)
        return data
    finally:
        os.close(fd)  # never a database: closing it drops no SQLite lock


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "not a regular file"


class _TimedOut(BaseException):
    """Raised by the alarm inside the blocked call (a BaseException, so no `except
    Exception` on the way swallows it)."""


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """SIGALRM after `seconds` interrupts a read blocked in this (the main) thread; the
    previous handler and timer are put back."""

    def ring(_signum: int, _frame: Any) -> None:
        raise _TimedOut

    previous = signal.signal(signal.SIGALRM, ring)
    started = time.monotonic()
    before = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _TimedOut:
        raise ReadRefused(f"did not answer within {seconds:g} s (MEMORY_FILE_READ_TIMEOUT)") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if before[0] > 0:  # someone else's timer: given back, less the time spent here
            left = before[0] - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001), before[1])


# Off the main thread no signal can interrupt a read: each thread reads through a helper
# thread of its own, and one that does not answer in time is abandoned (a daemon, still
# blocked: it never holds the process's exit) and replaced. ~20 µs a read.
_helpers = threading.local()


class _Helper(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="bounded-read", daemon=True)
        self.jobs: queue.SimpleQueue[tuple[str, int, str, list[Any], threading.Event]] = queue.SimpleQueue()
        self.start()

    def run(self) -> None:
        while True:
            path, limit, what, box, done = self.jobs.get()
            try:
                box.append(_read(path, limit, what))
            except BaseException as exc:
                box.append(exc)
            done.set()


def _on_a_thread(path: str, limit: int, what: str, seconds: float) -> bytes:
    helper: _Helper | None = getattr(_helpers, "helper", None)
    if helper is None:
        helper = _helpers.helper = _Helper()
    box: list[Any] = []
    done = threading.Event()
    helper.jobs.put((path, limit, what, box, done))
    if not done.wait(seconds):
        _helpers.helper = None
        raise ReadRefused(f"did not answer within {seconds:g} s (MEMORY_FILE_READ_TIMEOUT)")
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]
