"""The byte pass: deleted rows leave their text in SQLite files (free pages, the slack
inside pages, FTS5 segments, WAL frames) until this merges, vacuums and checkpoints
every SQLite file under MEMORY_ROOT and Django's own SQLite database.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

from facts.storage import sqlitegen

log = logging.getLogger(__name__)

# Files that are never SQLite databases: cards, profiles, lock files, temp files of
# interrupted writes (`facts.storage.atomic`), and a database's own journals.
_NOT_DATABASES = (".md", ".json", ".lock", "-wal", "-shm", "-journal")


def sqlite_files(root: Path) -> list[Path]:
    """Every SQLite database file under `root` (their -wal/-shm go with them).

    A file is recognised through SQLite itself, never by reading its header with a plain
    `open()`: closing any descriptor of a file drops every POSIX lock this process holds
    on it, SQLite's own included, and another process could then delete the WAL that this
    one still uses ("How to corrupt a database file", §2.2). SQLite's own opens and closes
    keep the locks of the process's other connections. A symbolic link (the stable name
    of a derived file, `facts.storage.sqlitegen`) is not listed: the file it names is."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if name.endswith(_NOT_DATABASES) or name.startswith(".tmp-") or path.is_symlink():
                continue
            if is_database(path):
                found.append(path)
    return sorted(found)


def is_database(path: Path) -> bool:
    """Whether `path` is an SQLite database, asked of SQLite (read-only, no create)."""
    try:
        conn = sqlite3.connect(
            f"{Path(os.path.abspath(path)).as_uri()}?mode=ro", uri=True, timeout=5, isolation_level=None
        )
    except sqlite3.Error:
        return False
    try:
        conn.execute("PRAGMA schema_version").fetchone()
        return True
    except sqlite3.DatabaseError as exc:
        # Busy or locked is a database another process is writing; anything else (not
        # a database, unreadable) is not one to scrub.
        text = str(exc).lower()
        return "locked" in text or "busy" in text
    finally:
        conn.close()


def scrub_sqlite(path: Path, *, timeout: float = 30.0) -> dict[str, Any]:
    """Leave no deleted byte in one SQLite file: merge every FTS5 table's segments (a
    deleted term stays in old segments until merged), VACUUM with secure_delete (free
    pages and the slack inside pages keep deleted rows), then checkpoint the WAL and
    truncate it (its frames keep old page images)."""
    started = time.monotonic()
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
        conn.execute("PRAGMA secure_delete=ON")
        conn.execute("PRAGMA temp_store=MEMORY")  # VACUUM's copy never touches a temp file
        fts = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND sql LIKE 'CREATE VIRTUAL TABLE%USING fts5%'"
            )
        ]
        for name in fts:
            quoted = '"' + name.replace('"', '""') + '"'
            conn.execute(f"INSERT INTO {quoted}({quoted}) VALUES('optimize')")
        conn.execute("VACUUM")
        busy = 1
        for _attempt in range(50):
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            if not busy:
                break
            time.sleep(0.1)  # a reader still holds an old snapshot
    finally:
        conn.close()
    return {
        "file": path.name,
        "fts_tables": len(fts),
        "wal_truncated": not busy,
        "s": round(time.monotonic() - started, 3),
    }


def sweep_generations(folder: Path) -> list[Path]:
    """Delete the superseded generations of every derived file under `folder`
    (`facts.storage.sqlitegen`): they still hold what the erasure removed from the current ones,
    and no process opens them again."""
    removed = []
    for link in sqlitegen.links_under(folder):
        removed += sqlitegen.sweep(link)
    return removed


def _django_sqlite_file() -> Path | None:
    if connection.vendor != "sqlite":
        return None
    name = str(connection.settings_dict.get("NAME") or "")
    if not name or name == ":memory:" or name.startswith("file:") or "mode=memory" in name:
        return None
    path = Path(name)
    return path if path.exists() else None


def scrub_bytes(root: Path) -> list[dict[str, Any]]:
    """`scrub_sqlite` on every SQLite file under MEMORY_ROOT and on Django's SQLite DB.
    PostgreSQL keeps dead tuples until (auto)vacuum: see docs/operations.md "Erasure and export"."""
    done = []
    # A machine-local search index (MEMORY_INDEX_DIR, docs/scaling.md) is outside the root.
    local_index = getattr(settings, "MEMORY_INDEX_DIR", "")
    folders = [Path(root)] + ([Path(local_index)] if local_index and Path(local_index).is_dir() else [])
    for folder in folders:
        sweep_generations(folder)
    targets = sqlite_files(Path(root))
    if len(folders) > 1:
        targets += [path for path in sqlite_files(folders[1]) if path not in targets]
    db = _django_sqlite_file()
    if db is not None and db not in targets:
        targets.append(db)
    for path in targets:
        try:
            done.append(scrub_sqlite(path))
        except sqlite3.Error as exc:
            log.error("erasure: could not scrub %s: %s", path, exc)
            done.append({"file": path.name, "error": str(exc)})
    return done


def checkpoint_django_db() -> None:
    """The audit event and the marker's end were written after the VACUUM: fold them
    into the main file too (they hold ids, no content)."""
    db = _django_sqlite_file()
    if db is None:
        return
    with contextlib.suppress(sqlite3.Error):
        conn = sqlite3.connect(db, timeout=30, isolation_level=None)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
