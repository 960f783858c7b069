"""The connection readers and writers use, and the rebuild of an index that has none.

`connection` gives this thread's connection to the current generation of the index
(`retrieval.indexdb`), checked before each use against the links, and reopened when
another process published a new generation. When there is no usable index, one thread
of one process (holding ``rebuild.lock``) builds a new generation from the files in the
background (`request_rebuild` → `retrieval.indexbuild.build_generation`); a reader
waits for it at most ``MEMORY_INDEX_WAIT_SECONDS`` and otherwise gets
`IndexUnavailable` (the API's 503), never an empty answer. `retrying` runs an action
once more after setting a corrupt generation aside; `status` is the health check's view.
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from filelock import Timeout

from facts.storage import sqlitegen
from facts.storage.atomic import make_private_dirs
from facts.storage.store import get_store

from . import vectorcache
from .indexbuild import build_generation
from .indexdb import (
    Handle,
    IndexUnavailable,
    bad,
    close_handle,
    connect,
    create_schema,
    current_handle,
    is_corruption,
    keep_handle,
    rebuild_lock,
    try_open,
)
from .indexpaths import index_path, vectors_link

log = logging.getLogger(__name__)


def _wait_bound() -> float:
    return float(getattr(settings, "MEMORY_INDEX_WAIT_SECONDS", 2.0))


def connection(*, wait: float | None = None, writing: bool = False) -> sqlite3.Connection:
    """This thread's connection to the index, opened once and reused.

    Before each use it checks that the index's link (and the vector cache's) still name
    the files it opened, and opens the new ones when they do not: a generation replaced
    by another process, a deleted index, another MEMORY_ROOT, a fork. With no usable
    index, a rebuild from the files starts in the background (`request_rebuild`) and
    this waits for it up to `wait` seconds (default ``MEMORY_INDEX_WAIT_SECONDS``), then
    raises `IndexUnavailable`; for a store with no card at all an empty index is made
    at once. `writing`: the write hook, which holds the commit gate, never waits (the
    rebuild's catch-up reads what it wrote).
    """
    path = index_path()
    handle = current_handle()
    if (
        handle is not None
        and handle.path == path
        and handle.pid == os.getpid()
        and sqlitegen.identity(path) == handle.ident
        and sqlitegen.identity(vectors_link(path)) == handle.vident
    ):
        return handle.conn
    close_handle()
    deadline = time.monotonic() + (0.0 if writing else _wait_bound() if wait is None else wait)
    while True:
        opened = try_open(path)
        if opened == "missing" and not writing and _create_empty(path):
            continue
        if not isinstance(opened, str):
            conn, ident, vident = opened
            keep_handle(Handle(path, os.getpid(), ident, vident, conn))
            return conn
        builder = request_rebuild(path, opened)
        if time.monotonic() >= deadline:
            raise IndexUnavailable(opened, _unavailable_message(path, opened))
        if builder is not None:
            builder.done.wait(min(0.05, max(0.0, deadline - time.monotonic())))
        else:
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))


def reset() -> None:
    """Forget this thread's connection (tests, and after a corruption)."""
    close_handle()


def _create_empty(path: Path) -> bool:
    """When the store holds no card at all, publish an empty index now (a fresh
    install's first read): that is what the files hold. False when there are cards, or
    a rebuild holds the lock."""
    store = get_store()
    if next(store.card_files(), None) is not None:
        return False
    lock = rebuild_lock(path)
    make_private_dirs(path.parent)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return False
    try:
        # Commits held off: the store is still empty when the index says so.
        with store.commit_gate(exclusive=True):
            if sqlitegen.target(path) is not None:
                return True
            if next(store.card_files(), None) is not None:
                return False
            fresh = sqlitegen.fresh(path)
            conn = connect(fresh, create=True)
            try:
                create_schema(conn)
            finally:
                conn.close()
            sqlitegen.publish(path, fresh)
            return True
    finally:
        lock.release()


class _Rebuild(threading.Thread):
    """Builds a new generation of the index at `path` from the files, if this process
    can take ``rebuild.lock`` (else another one is building it), and publishes it."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(name="index-rebuild", daemon=True)
        self.path = path
        self.reason = reason
        self.done = threading.Event()
        self.started = time.monotonic()
        self.outcome = ""  # "built", "there" (usable already), "refused" (another builds), "failed"
        self.store = get_store()

    def run(self) -> None:
        lock = rebuild_lock(self.path)
        try:
            make_private_dirs(self.path.parent)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                self.outcome = "refused"  # another process (or `reindex`) is building it
                return
            try:
                opened = try_open(self.path)  # built meanwhile?
                if not isinstance(opened, str):
                    opened[0].close()
                    self.outcome = "there"
                    return
                log.warning("search index %s is %s: rebuilding it from the files in the background", self.path, opened)
                count = build_generation(self.path, self.store)
                self.outcome = "built"
                _failures.pop(self.path, None)
                log.info("search index rebuilt: %d cards", count)
            finally:
                lock.release()
        except Exception as exc:
            self.outcome = "failed"
            _failures[self.path] = (time.time(), f"{exc.__class__.__name__}: {exc}")
            log.exception("rebuilding the search index %s failed; the next read tries again", self.path)
        finally:
            self.done.set()


_builders: dict[Path, _Rebuild] = {}
_builders_lock = threading.Lock()
_failures: dict[Path, tuple[float, str]] = {}
# After a failed or refused attempt, the next one waits this long.
RETRY_S = 1.0


def request_rebuild(path: Path, reason: str) -> _Rebuild | None:
    """Start a background rebuild of the index at `path` (at most one at a time per
    index in a process; after one that failed, or found another process building, not
    again for `RETRY_S`); returns the running one, if any."""
    with _builders_lock:
        running = _builders.get(path)
        if running is not None and running.is_alive():
            return running
        recent = running is not None and time.monotonic() - running.started < RETRY_S
        if recent and running is not None and running.outcome in ("failed", "refused"):
            return None
        builder = _Rebuild(path, reason)
        _builders[path] = builder
        builder.start()
        return builder


def wait_for_rebuilds(timeout: float | None = None) -> None:
    """Let the background rebuilds of this process finish (tests, and commands at exit)."""
    with _builders_lock:
        running = [b for b in _builders.values() if b.is_alive()]
    for builder in running:
        builder.join(timeout)


atexit.register(wait_for_rebuilds)


def rebuilding(path: Path) -> bool:
    """Whether some process holds ``rebuild.lock`` of the index at `path` (building it)."""
    lock_path = rebuild_lock(path).lock_file
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # a lock file, never a database: closing it drops no SQLite lock
    return False


def _unavailable_message(path: Path, reason: str) -> str:
    failed = _failures.get(path)
    if failed is not None and not rebuilding(path):
        return (
            f"the search index is {reason} and rebuilding it from the files failed ({failed[1]}); "
            "it is tried again on the next request, or run `manage.py reindex`"
        )
    return f"the search index is {reason}: it is being rebuilt from the files; retry in a few seconds"


def status(*, rebuild: bool = True) -> dict[str, object]:
    """The index as a health check sees it: ``ready`` (with its card count), or why
    not and whether a rebuild is running. Never waits; with `rebuild` it starts the
    background rebuild a reader would (the web server's health check), without it a
    check only looks (`doctor`)."""
    path = index_path()
    opened = try_open(path)
    if isinstance(opened, str):
        if rebuild:
            request_rebuild(path, opened)
        failed = _failures.get(path)
        return {
            "state": opened,
            "rebuilding": rebuilding(path),
            "message": _unavailable_message(path, opened),
            **({"last_error": failed[1]} if failed else {}),
        }
    conn = opened[0]
    try:
        row = conn.execute("SELECT value FROM stats WHERE name = 'docs'").fetchone()
    finally:
        conn.close()
    return {"state": "ready", "cards": int(row[0]) if row else 0}


def retrying(action: Callable[[sqlite3.Connection], object], *, writing: bool = False) -> object:
    """Run `action` on the connection; on corruption, set that generation aside, have
    it rebuilt in the background and try once more (waiting as `connection` does)."""
    try:
        return action(connection(writing=writing))
    except sqlite3.DatabaseError as exc:
        if not is_corruption(exc):
            raise
        log.warning("search index corrupt (%s): rebuilding it from the files in the background", exc)
        handle = current_handle()
        if handle is not None and handle.ident is not None:
            bad.add(handle.ident)
            if handle.vident is not None:
                vectorcache.bad.add(handle.vident)
        close_handle()
        return action(connection(writing=writing))
