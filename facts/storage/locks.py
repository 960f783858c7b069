"""Cross-process locks under ``{MEMORY_ROOT}/.locks/``.

`hold` takes the per-user and per-project locks a read-modify-write needs, in a fixed
order so two writers never deadlock; `commit_gate` is the gate every commit holds
shared and a rebuild's final catch-up holds exclusively. `facts.storage.store.Store.lock` and
`Store.commit_gate` are how the rest of the code takes them.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from facts.storage.atomic import PRIVATE_FILE_MODE, make_private_dirs
from facts.storage.errors import LockTimeout

_locks: dict[str, FileLock] = {}
_locks_guard = threading.Lock()
_thread_locks: dict[str, threading.RLock] = {}


@contextmanager
def hold(root: Path, names: Iterable[str], timeout: float) -> Iterator[None]:
    """The named locks (``users/{id}``, ``projects/{id}``), taken in sorted order."""
    held: list[FileLock | threading.RLock] = []
    try:
        for name in sorted(set(names)):
            # The file lock is shared by the threads of a process (a second thread
            # would just bump its counter), so threads first take a per-name RLock:
            # reentrant for nested locking in one thread, exclusive between threads.
            lock, guard = _file_lock(root, name), _thread_lock(root, name)
            if not guard.acquire(timeout=timeout):
                raise LockTimeout(f"timed out waiting for the lock of {name}")
            held.append(guard)
            try:
                lock.acquire(timeout=timeout)
            except Timeout:
                raise LockTimeout(f"timed out waiting for the lock of {name}") from None
            held.append(lock)
        yield
    finally:
        for taken in reversed(held):
            taken.release()


@contextmanager
def commit_gate(root: Path, timeout: float, *, exclusive: bool = False) -> Iterator[None]:
    """Every commit holds this gate shared while it writes files and mirror; a rebuild
    holds it exclusively for its short final catch-up, so no commit can slip between
    the rebuild re-reading the files and applying what it read.

    Taken after the bucket locks (never the other way round), so it cannot deadlock
    with them. A fresh descriptor each time: flock locks belong to the open file, so
    threads and nested commits each hold their own share.
    """
    path = root / ".locks" / "commit-gate.lock"
    make_private_dirs(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout("timed out waiting for a rebuild to finish its catch-up") from None
                time.sleep(0.005)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _thread_lock(root: Path, name: str) -> threading.RLock:
    key = str(root / ".locks" / f"{name}.lock")
    with _locks_guard:
        guard = _thread_locks.get(key)
        if guard is None:
            guard = _thread_locks[key] = threading.RLock()
        return guard


def _file_lock(root: Path, name: str) -> FileLock:
    path = root / ".locks" / f"{name}.lock"
    key = str(path)
    with _locks_guard:
        lock = _locks.get(key)
        if lock is None:
            make_private_dirs(path.parent)
            lock = FileLock(key, thread_local=False, mode=PRIVATE_FILE_MODE)
            _locks[key] = lock
        return lock
