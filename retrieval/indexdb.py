"""The search index's SQLite file: its schema, opening a generation, corruption, and WAL
checkpoints.

``index.sqlite3`` (`retrieval.indexpaths`) is a link to the index's current generation
(`facts.storage.sqlitegen`): a replacement is built under its own name and published
by moving the link. Each connection attaches the cache of derived data
(`retrieval.vectorcache`, ``vectors.sqlite3`` beside it) as schema ``vc``, so one query
joins a bucket's rows to their vectors. This thread's connection is kept in a `Handle`
(which files it opened), checked before each use by `retrieval.indexconn.connection`;
a generation found corrupt is remembered (`bad`) and never opened again.

Two tables hold the index: ``cards``, one row per active card (its format:
`retrieval.indexrows`), keyed by an integer ``rid`` with a unique index on the card id; and
``fts``, an external-content FTS5 table over it with a ``scope`` column (one hashed term
per bucket, so ``MATCH`` walks only one bucket's postings) and ``terms``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from facts.storage import sqlitegen
from facts.storage.atomic import PRIVATE_FILE_MODE, create_private_file

from . import vectorcache
from .indexpaths import vectors_link

log = logging.getLogger(__name__)

# Bump when the schema or the tokenization changes: an index of another version is
# rebuilt on first use, and its rows count as changed in `drift`.
# 5: vector hashes (vhash) and stemmed English terms; 6: terms hashes, line tokens;
# 7: the render's queue per row (corrections first); 8: FTS5 without column sizes;
# 9: line tokens of facts shown as written (no HTML entities: `factline.as_written`)
SCHEMA_VERSION = 9
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
# after its inserts, `retrieval.indexwrite.fill`).
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
    """No usable index now: it is missing, corrupt or outdated and being rebuilt from the
    files (or its rebuild failed). Readers answer 503 with `message`, never an empty
    result."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


# --- connections --------------------------------------------------------------------


@dataclass
class Handle:
    path: Path  # the link
    pid: int
    ident: tuple[int, int] | None  # the generations it opened: index, vector cache
    vident: tuple[int, int] | None
    conn: sqlite3.Connection


_local = threading.local()


def current_handle() -> Handle | None:
    """This thread's connection and the files it opened (None: none open)."""
    return getattr(_local, "handle", None)


def keep_handle(handle: Handle) -> None:
    _local.handle = handle


def _uri(path: Path, mode: str) -> str:
    return f"{Path(os.path.abspath(path)).as_uri()}?mode={mode}"


def connect(path: Path, *, create: bool = False) -> sqlite3.Connection:
    """A connection to the index file `path` (a generation, or the stable name), with
    the vector cache attached. Without `create` a missing file is an error: a reader
    never makes an empty index where one was deleted."""
    if create:
        create_private_file(path)
    # Autocommit mode: transactions are opened explicitly with BEGIN IMMEDIATE. URIs:
    # `mode=rw` (no create), and the cache is attached by URI too.
    conn = sqlite3.connect(
        _uri(path, "rwc" if create else "rw"),
        uri=True,
        timeout=BUSY_TIMEOUT_MS / 1000,
        isolation_level=None,
        check_same_thread=False,
    )
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
    vectorcache.attach(conn, path.parent)
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
    for link in (path, vectors_link(path)):
        current = sqlitegen.target(link)  # SQLite names the WAL after the generation
        if current is not None:
            with contextlib.suppress(FileNotFoundError):
                sizes.append(os.stat(f"{current}-wal").st_size)
    return max(sizes)


def _checkpoint(path: Path) -> None:
    try:
        # Plain connections, one per file: nothing of `connect`'s set-up is needed.
        for file in (path, vectors_link(path)):
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


def schema_ok(conn: sqlite3.Connection) -> bool:
    if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
        return False
    conn.execute("SELECT rid FROM cards LIMIT 1").fetchall()
    conn.execute("SELECT rowid FROM fts WHERE fts MATCH 'x' LIMIT 1").fetchall()
    return True


def create_schema(conn: sqlite3.Connection) -> None:
    conn.executescript(_SCHEMA + "".join(f"{sql};\n" for sql in CARD_INDEXES.values()))
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def rebuild_lock(path: Path) -> FileLock:
    return FileLock(str(path.parent / "rebuild.lock"), timeout=600, mode=PRIVATE_FILE_MODE)


def discard(generation: Path) -> None:
    """A generation that was never published: nobody else ever opened it."""
    for suffix in ("", *sqlitegen.COMPANIONS):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{generation}{suffix}")


def close_handle() -> None:
    handle: Handle | None = getattr(_local, "handle", None)
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


def cannot_open(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "unable to open" in str(exc).lower()


# Generations this process found corrupt while using them (their schema still opens):
# never opened again; the rebuild replaces them.
bad: set[tuple[int, int]] = set()

# A superseded generation is deleted once the link has named the new one this long.
SETTLE_S = 60.0


def try_open(path: Path) -> tuple[sqlite3.Connection, tuple[int, int] | None, tuple[int, int] | None] | str:
    """A connection to the current generation named by the link `path`, with the
    identities of the files it opened; or why there is none ("missing", "corrupt",
    "outdated")."""
    current = sqlitegen.target(path)
    if current is None:
        return "missing"
    ident = sqlitegen.identity(current)
    if ident is None:
        return "missing"
    if ident in bad:
        return "corrupt"
    try:
        conn = connect(current)
    except sqlite3.DatabaseError as exc:
        if cannot_open(exc):
            return "missing"
        if is_corruption(exc):
            bad.add(ident)
            return "corrupt"
        raise
    try:
        if not schema_ok(conn):
            conn.close()
            return "outdated"
    except sqlite3.DatabaseError as exc:
        conn.close()
        if is_corruption(exc):
            bad.add(ident)
            return "corrupt"
        raise
    # The cache file this connection attached (another process may replace the link
    # between the attach and a look at it).
    attached = next((row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "vc"), "")
    return conn, ident, sqlitegen.identity(Path(attached)) if attached else None
