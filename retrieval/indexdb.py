"""The index's SQLite file: schema, per-thread connections, and rebuild on first use.

Split out of `retrieval.index` (which holds the rows, writes, rebuilds and reads). The
index file attaches the vector cache (`retrieval.vectors`, ``vectors.sqlite3`` beside
it) as schema ``vc``, so one query joins a bucket's rows to their vectors.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from filelock import FileLock

from facts.atomic import PRIVATE_FILE_MODE, create_private_file, make_private_dirs

from . import vectors

log = logging.getLogger(__name__)

# Bump when the schema or the tokenization changes: an index of another version is
# rebuilt on first use, and its rows count as changed in `drift`.
# 5: vector hashes (vhash) and stemmed English terms; 6: terms hashes, line tokens;
# 7: the render's queue per row (corrections first); 8: FTS5 without column sizes;
# 9: line tokens of facts shown as written (no HTML entities: `render.as_written`)
SCHEMA_VERSION = 9
INDEX_DIR = ".retrieval"
INDEX_FILE = "index.sqlite3"
BUSY_TIMEOUT_MS = 30_000


_SCHEMA = """
CREATE TABLE IF NOT EXISTS cards (
    rid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    scope TEXT NOT NULL,
    bucket TEXT NOT NULL,
    user_id TEXT,
    agent_name TEXT,
    project_id TEXT,
    category TEXT NOT NULL,
    confidence REAL NOT NULL,
    created_at TEXT NOT NULL,
    created_ts REAL NOT NULL,
    expires_ts REAL,
    content TEXT NOT NULL,
    terms TEXT NOT NULL,
    dl INTEGER NOT NULL,
    sig TEXT NOT NULL,
    vhash TEXT,
    thash TEXT,
    ntok INTEGER,
    queue INTEGER NOT NULL
);
-- Document frequency of every term, and the corpus totals: what BM25's IDF and length
-- normalisation need. FTS5's own bm25() counts every matching row of the whole index
-- for each query term (2–10 ms for a common word at 100k rows); these make it O(terms).
CREATE TABLE IF NOT EXISTS df (term TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS stats (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
-- columnsize=0: no per-row token counts (the %_docsize table): they only serve FTS5's
-- own bm25(), which is not used (BM25 comes from the rows' dl and the df table).
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
    scope, terms, content='cards', content_rowid='rid', tokenize='unicode61', columnsize=0
);
"""


# The render's two queues (`retrieval.reads.bucket_queues`): a column of every row, so
# that each queue is one range of the ``cards_bucket`` index.
QUEUE_CORRECTIONS = 0
QUEUE_OTHERS = 1

# The secondary indexes of ``cards`` (a full rebuild drops them and makes them again
# after its inserts, `retrieval.index._fill`).
CARD_INDEXES = {
    # Vector search reads one bucket's (id, vector hash) pairs; erasure asks whether any
    # other row still holds a vector hash before dropping the vector.
    "cards_vec": "CREATE INDEX IF NOT EXISTS cards_vec ON cards (bucket, id, vhash, expires_ts)",
    "cards_vhash": "CREATE INDEX IF NOT EXISTS cards_vhash ON cards (vhash)",
    # Dropping a cached terms entry asks whether any other row still names it.
    "cards_thash": "CREATE INDEX IF NOT EXISTS cards_thash ON cards (thash)",
    # The render reads one bucket's cards, a queue at a time (corrections, then the
    # rest), best first (render_context). Covering, so the listing never touches the wide
    # rows; contents come by id after.
    "cards_bucket": "CREATE INDEX IF NOT EXISTS cards_bucket ON cards (bucket, queue, confidence DESC, id, expires_ts)",
    # ...and the few cards past their date: a small range instead of the whole bucket.
    "cards_expiring": (
        "CREATE INDEX IF NOT EXISTS cards_expiring ON cards (bucket, expires_ts, confidence, id) "
        "WHERE expires_ts IS NOT NULL"
    ),
}


class IndexUnavailable(Exception):
    """The index could not be opened or rebuilt (disk full, permissions, …)."""


# --- connections --------------------------------------------------------------------


def index_path() -> Path:
    # MEMORY_INDEX_DIR: a machine-local index when the file root is shared (scaling.md).
    root, local = settings.MEMORY_ROOT, getattr(settings, "MEMORY_INDEX_DIR", "")
    global _path_memo
    memo = _path_memo
    # Every read asks for it: building the Path each time cost ~10 µs of a ~0.4 ms render.
    if memo is not None and memo[0] is root and memo[1] == local:
        return memo[2]
    path = Path(local) / INDEX_FILE if local else Path(root) / INDEX_DIR / INDEX_FILE
    _path_memo = (root, local, path)
    return path


_path_memo: tuple[object, object, Path] | None = None


@dataclass
class _Handle:
    path: Path
    pid: int
    ident: tuple[int, int]
    conn: sqlite3.Connection


_local = threading.local()


def _connect(path: Path) -> sqlite3.Connection:
    create_private_file(path)
    # Autocommit mode: transactions are opened explicitly with BEGIN IMMEDIATE.
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    # No checkpoint inside a writer's commit: one copied ~4 MB of WAL pages back and
    # made an update's p99 25-33 ms against a p50 of 1.3 ms at 100k rows. `after_write`
    # checkpoints on a background thread instead.
    conn.execute("PRAGMA wal_autocheckpoint=0")
    # A checkpointed WAL is cut back to this size when the log restarts (else its
    # file keeps the largest size it ever had).
    conn.execute(f"PRAGMA journal_size_limit={WAL_KEEP_BYTES}")
    vectors.attach(conn, path.parent)
    conn.execute(f"PRAGMA vc.journal_size_limit={WAL_KEEP_BYTES}")
    # Per schema: the attached cache kept SQLite's default (FULL), which fsynced its WAL
    # at every commit: ~0.8 ms of a ~1 ms single-card update. Derived data, like the
    # index itself: NORMAL (WAL stays consistent; a power cut may lose the last commits,
    # which the next rebuild or `reindex --check` brings back).
    conn.execute("PRAGMA vc.synchronous=NORMAL")
    return conn


# Checkpoint once either WAL holds this much: what SQLite's own default (1,000 pages)
# would have let it reach...
CHECKPOINT_BYTES = 4 * 1024 * 1024
# ...and only once writes have paused this long: a checkpoint copies the WAL's pages
# into the database and fsyncs it, and a write landing meanwhile waited on the disk
# (p99 of a single-card update 4-7 ms against 1.3 without checkpoints at 100k rows,
# with the checkpoint on a thread or in another process alike). Bursts of writes then
# run with none; the quiet after them checkpoints.
CHECKPOINT_IDLE_S = 0.25
# Under writes that never pause, the WAL is checkpointed anyway at this size.
CHECKPOINT_HARD_BYTES = 64 * 1024 * 1024
WAL_KEEP_BYTES = 1024 * 1024
# A WAL a reader keeps from being restarted stays big: look again only every so many
# writes, not after each.
CHECKPOINT_EVERY = 32
_writes_since_checkpoint = 0


class _Checkpointer:
    """One daemon thread per process that checkpoints the index's WALs when asked and
    writes have been quiet for `CHECKPOINT_IDLE_S` (or the WAL passed the hard size).
    PASSIVE: it never waits for readers or blocks writers; what it cannot copy now, the
    next one will."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.wanted = threading.Event()
        self.thread: threading.Thread | None = None
        self.pid = 0
        self.path: Path | None = None
        self.last_write = 0.0

    def request(self, path: Path) -> None:
        with self.lock:
            self.path = path
            if self.thread is None or self.pid != os.getpid() or not self.thread.is_alive():
                self.pid = os.getpid()
                self.wanted = threading.Event()
                self.thread = threading.Thread(target=self._run, name="index-checkpoint", daemon=True)
                self.thread.start()
        self.wanted.set()

    def _run(self) -> None:
        while True:
            self.wanted.wait()
            while True:
                quiet = time.monotonic() - self.last_write
                if quiet >= CHECKPOINT_IDLE_S or self.path is None or _wal_bytes(self.path) >= CHECKPOINT_HARD_BYTES:
                    break
                time.sleep(CHECKPOINT_IDLE_S - quiet)
            self.wanted.clear()
            if self.path is not None:
                _checkpoint(self.path)


_checkpointer = _Checkpointer()


def _wal_bytes(path: Path) -> int:
    sizes = [0]
    for name in (f"{path.name}-wal", f"{vectors.VECTORS_FILE}-wal"):
        with contextlib.suppress(FileNotFoundError):
            sizes.append(os.stat(path.parent / name).st_size)
    return max(sizes)


def _checkpoint(path: Path) -> None:
    try:
        # Plain connections, one per file: nothing of `_connect`'s set-up is needed.
        for file in (path, path.parent / vectors.VECTORS_FILE):
            if not file.exists():
                continue
            conn = sqlite3.connect(f"file:{file}?mode=rw", uri=True, isolation_level=None, timeout=1)
            try:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            finally:
                conn.close()
    except sqlite3.Error:
        log.warning("checkpointing the search index's WAL failed; a later write asks again", exc_info=True)


def after_write(path: Path) -> None:
    """After a write transaction committed: note the time, and when a WAL has grown
    past `CHECKPOINT_BYTES`, ask for a checkpoint (`_Checkpointer`: once writes pause).
    Costs the writer a clock read, and two stat calls every `CHECKPOINT_EVERY` writes."""
    global _writes_since_checkpoint
    _checkpointer.last_write = time.monotonic()
    _writes_since_checkpoint += 1
    if _writes_since_checkpoint < CHECKPOINT_EVERY:
        return
    _writes_since_checkpoint = 0
    if _wal_bytes(path) >= CHECKPOINT_BYTES:
        _checkpointer.request(path)


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


def _schema_ok(conn: sqlite3.Connection) -> bool:
    if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
        return False
    conn.execute("SELECT rid FROM cards LIMIT 1").fetchall()
    conn.execute("SELECT rowid FROM fts WHERE fts MATCH 'x' LIMIT 1").fetchall()
    return True


def _create_schema(conn: sqlite3.Connection) -> None:
    conn.executescript(_SCHEMA + "".join(f"{sql};\n" for sql in CARD_INDEXES.values()))
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def _rebuild_lock(path: Path) -> FileLock:
    return FileLock(str(path.parent / "rebuild.lock"), timeout=600, mode=PRIVATE_FILE_MODE)


def _remove_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def _close_handle() -> None:
    handle: _Handle | None = getattr(_local, "handle", None)
    _local.handle = None
    if handle is not None:
        with contextlib.suppress(sqlite3.Error):
            handle.conn.close()


def is_corruption(exc: BaseException) -> bool:
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return False
    return not isinstance(exc, sqlite3.OperationalError) or any(
        word in text for word in ("malformed", "not a database", "no such table", "no such column", "corrupt")
    )


def connection() -> sqlite3.Connection:
    """This thread's connection to the index, opened once and reused.

    It is reopened when the settings point at another MEMORY_ROOT, after a fork, or
    when the file was replaced or deleted; a missing, corrupt or outdated index is
    rebuilt from the files first.
    """
    path = index_path()
    handle: _Handle | None = getattr(_local, "handle", None)
    if handle is not None and handle.path == path and handle.pid == os.getpid() and _file_id(path) == handle.ident:
        return handle.conn
    _close_handle()
    conn = _open_ready(path)
    ident = _file_id(path)
    assert ident is not None
    _local.handle = _Handle(path, os.getpid(), ident, conn)
    return conn


def reset() -> None:
    """Forget this thread's connection (tests, and after a corruption)."""
    _close_handle()


def _open_ready(path: Path) -> sqlite3.Connection:
    make_private_dirs(path.parent)
    if path.exists():
        try:
            conn = _connect(path)
            if _schema_ok(conn):
                return conn
            conn.close()
        except sqlite3.DatabaseError as exc:
            if not is_corruption(exc):
                raise
    return _rebuild_from_files(path)


def _rebuild_from_files(path: Path) -> sqlite3.Connection:
    """Missing, corrupt or outdated: rebuild it from the files, once across processes."""
    from facts.mirror import snapshot
    from facts.store import get_store

    with _rebuild_lock(path):
        if path.exists():
            try:
                conn = _connect(path)
                if _schema_ok(conn):  # another process rebuilt it while we waited
                    return conn
                conn.close()
            except sqlite3.DatabaseError as exc:
                if not is_corruption(exc):
                    raise
            log.warning("search index %s is corrupt or outdated: rebuilding it from the files", path)
            _remove_files(path)
        else:
            log.info("search index %s is missing: building it from the files", path)
        conn = _connect(path)
        _create_schema(conn)
        snap = snapshot(get_store())
        from .index import _fill

        count = _fill(conn, snap)
        log.info("search index rebuilt: %d cards", count)
        return conn


def _retrying(action: Callable[[sqlite3.Connection], object]) -> object:
    """Run `action` on the connection; on corruption, rebuild the index and retry once."""
    try:
        return action(connection())
    except sqlite3.DatabaseError as exc:
        if not is_corruption(exc):
            raise
        log.warning("search index corrupt (%s): rebuilding", exc)
        _close_handle()
        path = index_path()
        with _rebuild_lock(path):
            _remove_files(path)
        return action(connection())
