"""The index's SQLite file: schema, per-thread connections, and the rebuild of a
missing, corrupt or outdated index off the request path.

Split out of `retrieval.index` (which holds the rows, writes, rebuilds and reads). The
index file attaches the vector cache (`retrieval.vectors`, ``vectors.sqlite3`` beside
it) as schema ``vc``, so one query joins a bucket's rows to their vectors.

``index.sqlite3`` is a link to the index's current generation (`facts.storage.sqlitegen`): a
replacement is built under its own name and published by moving the link, and every
connection checks before each use that the link still names the files it opened (the
index's and the vector cache's: two stats), reconnecting when it does not. When there is
no usable index, one thread of one process (holding ``rebuild.lock``) builds a new
generation from the files in the background; a reader waits for it at most
``MEMORY_INDEX_WAIT_SECONDS`` and otherwise gets `IndexUnavailable` (the API's 503),
never an empty answer.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from filelock import FileLock, Timeout

from facts.storage import sqlitegen
from facts.storage.atomic import PRIVATE_FILE_MODE, create_private_file, make_private_dirs

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
    """No usable index now: it is missing, corrupt or outdated and being rebuilt from the
    files (or its rebuild failed). Readers answer 503 with `message`, never an empty
    result."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


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


def vectors_link(path: Path) -> Path:
    """The vector cache's stable name beside the index's."""
    return path.parent / vectors.VECTORS_FILE


@dataclass
class _Handle:
    path: Path  # the link
    pid: int
    ident: tuple[int, int] | None  # the generations it opened: index, vector cache
    vident: tuple[int, int] | None
    conn: sqlite3.Connection


_local = threading.local()


def _uri(path: Path, mode: str) -> str:
    return f"{Path(os.path.abspath(path)).as_uri()}?mode={mode}"


def _connect(path: Path, *, create: bool = False) -> sqlite3.Connection:
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
    for link in (path, vectors_link(path)):
        current = sqlitegen.target(link)  # SQLite names the WAL after the generation
        if current is not None:
            with contextlib.suppress(FileNotFoundError):
                sizes.append(os.stat(f"{current}-wal").st_size)
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


def _discard(generation: Path) -> None:
    """A generation that was never published: nobody else ever opened it."""
    for suffix in ("", *sqlitegen.COMPANIONS):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{generation}{suffix}")


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


def _cannot_open(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "unable to open" in str(exc).lower()


# Generations this process found corrupt while using them (their schema still opens):
# never opened again; the rebuild replaces them.
_bad: set[tuple[int, int]] = set()

# A superseded generation is deleted once the link has named the new one this long.
SETTLE_S = 60.0


def _wait_bound() -> float:
    return float(getattr(settings, "MEMORY_INDEX_WAIT_SECONDS", 2.0))


def _try_open(path: Path) -> tuple[sqlite3.Connection, tuple[int, int] | None, tuple[int, int] | None] | str:
    """A connection to the current generation named by the link `path`, with the
    identities of the files it opened; or why there is none ("missing", "corrupt",
    "outdated")."""
    current = sqlitegen.target(path)
    if current is None:
        return "missing"
    ident = sqlitegen.identity(current)
    if ident is None:
        return "missing"
    if ident in _bad:
        return "corrupt"
    try:
        conn = _connect(current)
    except sqlite3.DatabaseError as exc:
        if _cannot_open(exc):
            return "missing"
        if is_corruption(exc):
            _bad.add(ident)
            return "corrupt"
        raise
    try:
        if not _schema_ok(conn):
            conn.close()
            return "outdated"
    except sqlite3.DatabaseError as exc:
        conn.close()
        if is_corruption(exc):
            _bad.add(ident)
            return "corrupt"
        raise
    # The cache file this connection attached (another process may replace the link
    # between the attach and a look at it).
    attached = next((row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "vc"), "")
    return conn, ident, sqlitegen.identity(Path(attached)) if attached else None


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
    handle: _Handle | None = getattr(_local, "handle", None)
    if (
        handle is not None
        and handle.path == path
        and handle.pid == os.getpid()
        and sqlitegen.identity(path) == handle.ident
        and sqlitegen.identity(vectors_link(path)) == handle.vident
    ):
        return handle.conn
    _close_handle()
    deadline = time.monotonic() + (0.0 if writing else _wait_bound() if wait is None else wait)
    while True:
        opened = _try_open(path)
        if opened == "missing" and not writing and _create_empty(path):
            continue
        if not isinstance(opened, str):
            conn, ident, vident = opened
            _local.handle = _Handle(path, os.getpid(), ident, vident, conn)
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
    _close_handle()


def _create_empty(path: Path) -> bool:
    """When the store holds no card at all, publish an empty index now (a fresh
    install's first read): that is what the files hold. False when there are cards, or
    a rebuild holds the lock."""
    from facts.storage.store import get_store

    store = get_store()
    if next(store.card_files(), None) is not None:
        return False
    lock = _rebuild_lock(path)
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
            conn = _connect(fresh, create=True)
            try:
                _create_schema(conn)
            finally:
                conn.close()
            sqlitegen.publish(path, fresh)
            return True
    finally:
        lock.release()


# --- rebuilding a missing, corrupt or outdated index off the request path -------------


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
        from facts.storage.store import get_store

        self.store = get_store()

    def run(self) -> None:
        lock = _rebuild_lock(self.path)
        try:
            make_private_dirs(self.path.parent)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                self.outcome = "refused"  # another process (or `reindex`) is building it
                return
            try:
                opened = _try_open(self.path)  # built meanwhile?
                if not isinstance(opened, str):
                    opened[0].close()
                    self.outcome = "there"
                    return
                log.warning("search index %s is %s: rebuilding it from the files in the background", self.path, opened)
                from .index import build_generation

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
    lock_path = path.parent / "rebuild.lock"
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
    opened = _try_open(path)
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


def _retrying(action: Callable[[sqlite3.Connection], object], *, writing: bool = False) -> object:
    """Run `action` on the connection; on corruption, set that generation aside, have
    it rebuilt in the background and try once more (waiting as `connection` does)."""
    try:
        return action(connection(writing=writing))
    except sqlite3.DatabaseError as exc:
        if not is_corruption(exc):
            raise
        log.warning("search index corrupt (%s): rebuilding it from the files in the background", exc)
        handle: _Handle | None = getattr(_local, "handle", None)
        if handle is not None and handle.ident is not None:
            _bad.add(handle.ident)
            if handle.vident is not None:
                vectors.bad.add(handle.vident)
        _close_handle()
        return action(connection(writing=writing))
