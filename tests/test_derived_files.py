"""Derived SQLite files (index, vectors, rate limits) under processes that share them
(issue 34): nothing this code does may drop another connection's locks or delete a WAL
that some process still uses, and a file replaced under a running process is noticed.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from facts.erasure import scrub

_OPEN_AND_CLOSE = (
    "import sqlite3, sys\n"
    "conn = sqlite3.connect(sys.argv[1])\n"
    "conn.execute('SELECT count(*) FROM t').fetchall()\n"
    "conn.close()\n"
)


def _live_wal_database(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    return conn


def test_it_finds_sqlite_files_without_dropping_the_locks_this_process_holds(tmp_path: Path) -> None:
    root = tmp_path / "root"
    db = root / ".retrieval" / "index.sqlite3"
    db.parent.mkdir(parents=True)
    (root / "card.md").write_text("---\nid: x\n---\nnot a database\n")
    (root / "notes.txt").write_text("not a database either")
    conn = _live_wal_database(db)
    wal = Path(f"{db}-wal")
    before = wal.stat().st_ino

    assert scrub.sqlite_files(root) == [db]
    # Another process opens and closes the database. Its close deletes the WAL only when
    # it is the last connection: this process's must still count.
    subprocess.run([sys.executable, "-c", _OPEN_AND_CLOSE, str(db)], check=True, timeout=60)

    assert wal.exists() and wal.stat().st_ino == before, "the WAL this process uses was deleted"
    conn.execute("INSERT INTO t VALUES (2)")
    assert subprocess.run(
        [sys.executable, "-c", "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM t').fetchone()[0])", str(db)],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.strip() == "2", "another process does not see this one's writes"  # fmt: skip
    conn.close()


def test_the_rate_limit_counts_in_the_file_that_is_there_now(tmp_path: Path, settings, monkeypatch) -> None:
    from memoryadmin import ratelimit

    # The file of one machine (on PostgreSQL the counters are rows of the database).
    monkeypatch.setattr(ratelimit, "shared", lambda: False)

    settings.API_RATE_LIMIT_DB = str(tmp_path / "ratelimit.sqlite3")
    ratelimit._local.connections = {}
    assert [ratelimit.count("hits", "k", 1) for _ in range(3)] == [1, 2, 3]
    # Deleted by hand (or by a restore) while this process keeps counting: the next
    # count goes to the new file, where every other process counts too.
    for suffix in ("", "-wal", "-shm"):
        Path(f"{settings.API_RATE_LIMIT_DB}{suffix}").unlink(missing_ok=True)
    assert ratelimit.count("hits", "k", 1) == 1
    other = sqlite3.connect(settings.API_RATE_LIMIT_DB)
    assert other.execute("SELECT n FROM hits WHERE key = 'k'").fetchall() == [(1,)]
    other.close()
    ratelimit._local.connections = {}


def test_a_sweep_removes_older_generations_and_never_the_current_or_a_newer_one(tmp_path: Path) -> None:
    from facts.storage import sqlitegen

    link = tmp_path / "index.sqlite3"
    old, current = sqlitegen.fresh(link), sqlitegen.fresh(link)
    sqlitegen.publish(link, current)
    building = sqlitegen.fresh(link)  # a rebuild under way: not published yet
    Path(f"{old}-wal").write_bytes(b"")
    Path(f"{current}-wal").write_bytes(b"")
    (tmp_path / "index.sqlite3-shm").write_bytes(b"")  # left by the plain file a link replaced

    removed = sqlitegen.sweep(link)

    assert sorted(removed) == sorted([old, Path(f"{old}-wal"), tmp_path / "index.sqlite3-shm"])
    assert current.exists() and Path(f"{current}-wal").exists() and building.exists()
    assert sqlitegen.target(link) == current
