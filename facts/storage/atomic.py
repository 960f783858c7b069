"""Atomic, fsynced, private file writes, and the thread pool that batches them.

A file is written to a temp file beside it, fsynced, renamed over the old one and its
folder fsynced: a crash leaves the old file or the new one, never a torn one. A batch
(`atomic_write_many`) writes its temp files side by side on a small thread pool and
fsyncs each folder once. Everything created under MEMORY_ROOT is private to its user.
"""

from __future__ import annotations

import functools
import os
import secrets
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from typing import Any

# Temp files of atomic writes; readers and the rebuild skip them.
TEMP_PREFIX = ".tmp-"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Memory is personal: what this code creates under MEMORY_ROOT is for its own user only
# (`doctor` warns about folders other users can read). Modes are given at creation, not
# chmod-ed afterwards, so there is no moment when a file is open to others; the umask can
# only take bits away.
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def _create_folders(path: Path, parents: list[Path]) -> None:
    """Create the missing folders of `path` (private), top down, appending to `parents`
    each folder that gained an entry (and so still needs an fsync) as soon as it has."""
    missing: list[Path] = []
    cursor = path
    while not cursor.exists():
        missing.append(cursor)
        cursor = cursor.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            continue
        parents.append(folder.parent)


def make_private_dirs(path: Path) -> None:
    """`mkdir -p` whose every new folder is private (`Path.mkdir(parents=True)` and
    `os.makedirs` give the intermediate folders the default mode)."""
    _create_folders(Path(path), [])


def create_private_file(path: Path) -> None:
    """Create `path` empty and private unless it exists, e.g. before SQLite opens it
    (SQLite creates its database, and then its -wal and -shm files, with the database
    file's mode)."""
    make_private_dirs(Path(path).parent)
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE_MODE))


def _write_temp(path: Path, data: str) -> str:
    """`data` in a fsynced temp file beside `path`; returns the temp file's name.

    Plain `os` calls, each releasing the GIL: the write threads hold it as little as
    possible while the calling thread works beside them."""
    tmp = os.path.join(path.parent, f"{TEMP_PREFIX}{secrets.token_hex(8)}{path.suffix}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE_MODE)  # as mkstemp
    try:
        try:
            view = memoryview(data.encode("utf-8"))
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


def _rename(tmp: str, path: Path) -> None:
    try:
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write(path: Path, data: str) -> None:
    """Temp file in the same folder → fsync → os.replace → fsync the folder (and the
    parent of any folder created for it)."""
    error = atomic_write_many([(path, data)])[0]
    if error is not None:
        raise error


_WRITE_THREADS = 8
_write_pool_guard = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """The process's write pool, made once (under a lock: a second pool would be left
    holding threads nobody uses)."""
    with _write_pool_guard:
        return _the_pool()


@functools.cache
def _the_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=_WRITE_THREADS, thread_name_prefix="card-write")


def _new_pool_after_fork() -> None:
    # A forked child (`manage.py ingest --workers`) has none of the parent's threads:
    # it starts a pool of its own on first use.
    global _write_pool_guard
    _write_pool_guard = threading.Lock()
    _the_pool.cache_clear()


os.register_at_fork(after_in_child=_new_pool_after_fork)


def _each(function: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """`function` over `items` on the write pool (in the calling thread for one item);
    each result is the value or the exception it raised."""

    def call(item: Any) -> Any:
        try:
            return function(item)
        except Exception as exc:
            return exc

    return list(_pool().map(call, items)) if len(items) > 1 else [call(item) for item in items]


def atomic_write_many(
    items: Sequence[tuple[Path, str]], *, while_waiting: Callable[[], None] | None = None
) -> list[BaseException | None]:
    """`atomic_write` for a batch of files: one error (or None) per item, in order.

    Each file still gets its own fsynced temp file and rename, and the call returns
    only once every folder involved has been fsynced, so each write is exactly as
    durable as with `atomic_write`. A batch runs in phases: the temp files are written
    and fsynced side by side on the write threads, renamed in order, then
    each folder holding one of them (and each folder that gained a subfolder) is
    fsynced once, where a loop of `atomic_write` would fsync a folder per file and
    the parent of every new folder once per folder. `while_waiting` runs on the
    calling thread while the disk works on the temp files; its exception is raised
    once the batch is complete.
    """
    # The write threads create missing folders as they go; every folder that gained a
    # new subfolder joins the folders fsynced at the end (cards landing in twenty new
    # shard folders fsync `facts/` once). A list's append is atomic.
    new_parents: list[Path] = []

    def write(item: tuple[Path, str]) -> str:
        path, data = item
        _create_folders(path.parent, new_parents)
        return _write_temp(path, data)

    futures = [_pool().submit(write, item) for item in items] if len(items) > 1 else []
    failure: BaseException | None = None
    if while_waiting is not None:
        try:
            while_waiting()
        except BaseException as exc:
            failure = exc  # raised once the batch is complete: never with writes in flight
    temps: list[Any] = [f.exception() or f.result() for f in futures] if futures else _each(write, items)
    # Renamed in order: a path named twice ends with its last version.
    results: list[BaseException | None] = []
    for (path, _), temp in zip(items, temps, strict=True):
        if isinstance(temp, BaseException):
            results.append(temp)
            continue
        try:
            _rename(temp, path)
        except Exception as exc:
            results.append(exc)
            continue
        results.append(None)
    written = {path.parent for (path, _), error in zip(items, results, strict=True) if error is None}
    parents = set(new_parents)
    folders = sorted(written | parents)
    synced = dict(zip(folders, _each(fsync_dir, folders), strict=True))
    if failure is not None:
        raise failure
    # A new folder's parent that failed to sync fails every file of the batch: which
    # files depended on it is not worth tracking for an error this rare.
    parent_error = next((synced[f] for f in sorted(parents) if synced[f] is not None), None)
    return [error or synced[path.parent] or parent_error for (path, _), error in zip(items, results, strict=True)]


def remove_file(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True
