"""Derived SQLite files replaced while other processes use them: generations (issue 34).

A derived file (the search index, the vector cache) keeps a stable name, e.g.
``.retrieval/index.sqlite3``, that is a symbolic link to its current *generation*,
``index.g<token>.sqlite3``. A new generation is built under its own name and published
by replacing the link (one rename). SQLite opens the file a link names and names its WAL
and shared-memory files after that file, so two generations never share a WAL.

A process that opened a generation checks before each use that the link still names it
(`identity`: one stat) and opens the new one when it does not. Nothing ever deletes a
file some process may still open: a generation is deleted (`sweep`) only once the link
has moved on from it, and no process opens it again after that, since each re-checks
the link first. Replacing a file in place (delete it, create a new one at the same
name) is what let a process keep writing to a WAL that others no longer saw ("How to
corrupt a database file", §2.2); it is never done.

A plain file at the stable name (made before generations existed) is used as it is and
becomes a link the first time it is replaced.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from pathlib import Path

from .atomic import create_private_file, fsync_dir

# The companions SQLite keeps beside a database file.
COMPANIONS = ("-wal", "-shm", "-journal")


def _split(link: Path) -> tuple[str, str]:
    stem, dot, suffix = link.name.partition(".")
    return stem, f"{dot}{suffix}"


def is_generation_of(link: Path, name: str) -> bool:
    """Whether `name` (a file name beside `link`) is one of `link`'s generations."""
    stem, suffix = _split(link)
    return name.startswith(f"{stem}.g") and name.endswith(suffix) and "/" not in name


def target(link: Path) -> Path | None:
    """The file `link` stands for now, or None when there is none (no link, a link to
    a deleted file). A plain file at the stable name is its own target."""
    try:
        name = os.readlink(link)
    except FileNotFoundError:
        return None
    except OSError:  # not a link: a plain file from before generations, or a folder
        return link if link.is_file() else None
    path = link.parent / name
    return path if path.is_file() else None


def identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file `path` stands for (following a link), None if none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def fresh(link: Path) -> Path:
    """A new, empty, private generation file beside `link` (not published yet)."""
    stem, suffix = _split(link)
    # Time first: generations sort by age, and `sweep` can tell which came last.
    path = link.parent / f"{stem}.g{time.time_ns():016x}{secrets.token_hex(3)}{suffix}"
    create_private_file(path)
    return path


def publish(link: Path, generation: Path) -> None:
    """Make `link` name `generation` (one rename; readers see the old or the new)."""
    tmp = link.parent / f".{link.name}.{secrets.token_hex(6)}.link"
    os.symlink(generation.name, tmp)
    try:
        os.replace(tmp, link)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        fsync_dir(link.parent)


def superseded(link: Path) -> list[Path]:
    """Files of `link` that no process opens any more: its generations older than the
    current one (with their WAL and shared memory), and the WAL and shared memory left
    by a plain file that a link replaced. A newer generation is left alone: one being
    built (or published a moment ago, after the link was read here)."""
    folder = link.parent
    if not link.is_symlink():
        return []
    current = os.readlink(link)
    found: list[Path] = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(folder):
            name = entry.name
            base = next((name[: -len(c)] for c in COMPANIONS if name.endswith(c)), name)
            # index.sqlite3-wal under a link: SQLite names the WAL after the target, so
            # this one was a plain file's, before the link replaced it.
            leftover = base == link.name and base != name
            # Generation names sort by their making (`fresh`: the time comes first).
            older = is_generation_of(link, base) and base < current
            if leftover or older:
                found.append(folder / name)
    return sorted(found)


def published_at(link: Path) -> float | None:
    """When `link` was last replaced (its own mtime), None when it is not a link."""
    try:
        st = os.lstat(link)
    except FileNotFoundError:
        return None
    return st.st_mtime if os.path.islink(link) else None


def sweep(link: Path, *, settled_s: float = 0.0) -> list[Path]:
    """Delete what `superseded` lists, once the link has named its current generation
    for `settled_s` seconds (a process that resolved the old link a moment before the
    swap has long re-checked it by then). Returns what was deleted."""
    at = published_at(link)
    if at is None or time.time() - at < settled_s:
        return []
    removed = []
    for path in superseded(link):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed.append(path)
    return removed


def links_under(root: Path) -> list[Path]:
    """Every generation link under `root` (what `sweep` works on)."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if path.is_symlink() and is_generation_of(path, os.readlink(path)):
                found.append(path)
    return sorted(found)
