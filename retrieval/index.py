"""The FTS5 search index: a derived copy of the active cards, rebuildable from the files.

It lives in its own SQLite file, ``MEMORY_ROOT/.retrieval/index.sqlite3`` (WAL, busy
timeout), outside the Django migrations. Two tables:

``cards``  one row per active card, keyed by an integer ``rid`` with a unique index on
           the card id, so an update finds its row in O(log n);
``fts``    an external-content FTS5 table over ``cards`` with two columns: ``scope``,
           holding one hashed term per bucket (user × agent, or project), and
           ``terms``, the jieba/lower-cased tokens of the content.

A search ANDs the scope term into ``MATCH``, so FTS5 only ever walks the postings of
one bucket instead of ranking every user's matches and filtering afterwards (the
comparable design that filtered after ``MATCH`` took 44 ms p50 per query at 100k rows).

The index is told about every committed write by `facts.hooks` (`on_cards_changed`),
rebuilt from the files by ``manage.py reindex`` (`rebuild_from_snapshot`), compared
with them by ``reindex --check`` (`drift`), and rebuilt on first use when its file is
missing or corrupt.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from filelock import FileLock

from facts.atomic import PRIVATE_FILE_MODE, create_private_file, make_private_dirs
from facts.cardfile import Card
from facts.enums import CardStatus
from facts.ids import normalize_agent
from facts.mirror import Drift, FileSnapshot

from .tokenize import document_terms, quote

log = logging.getLogger(__name__)

# Bump when the schema or the tokenization changes: an index of another version is
# rebuilt on first use, and its rows count as changed in `drift`.
SCHEMA_VERSION = 4
INDEX_DIR = ".retrieval"
INDEX_FILE = "index.sqlite3"
BUSY_TIMEOUT_MS = 30_000

Progress = Callable[[int, int], None]

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
    sig TEXT NOT NULL
);
-- The render reads one bucket's cards, best first (render_context).
-- Covering, so the listing never touches the wide rows; contents come by id after.
CREATE INDEX IF NOT EXISTS cards_bucket ON cards (bucket, confidence DESC, id, category, expires_ts);
-- Document frequency of every term, and the corpus totals: what BM25's IDF and length
-- normalisation need. FTS5's own bm25() counts every matching row of the whole index
-- for each query term (2–10 ms for a common word at 100k rows); these make it O(terms).
CREATE TABLE IF NOT EXISTS df (term TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS stats (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
    scope, terms, content='cards', content_rowid='rid', tokenize='unicode61'
);
"""
_COLUMNS = (
    "id, scope, bucket, user_id, agent_name, project_id, category, confidence, created_at, created_ts, "
    "expires_ts, content, terms, dl, sig"
)
_INSERT = f"INSERT INTO cards ({_COLUMNS}) VALUES ({', '.join('?' * 15)})"
_UPDATE = (
    "UPDATE cards SET scope=?, bucket=?, user_id=?, agent_name=?, project_id=?, category=?, confidence=?, "
    "created_at=?, created_ts=?, expires_ts=?, content=?, terms=?, dl=?, sig=? WHERE rid=?"
)
_TERMS = 12  # position of `terms` in a row
_DF_UP = "INSERT INTO df (term, n) VALUES (?, 1) ON CONFLICT (term) DO UPDATE SET n = n + 1"
_DF_DOWN = "UPDATE df SET n = n - 1 WHERE term = ?"
_STATS_ADD = (
    "INSERT INTO stats (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = value + excluded.value"
)


class IndexUnavailable(Exception):
    """The index could not be opened or rebuilt (disk full, permissions, …)."""


# --- scopes and rows ----------------------------------------------------------------


def bucket_key(*, user_id: str | None = None, agent_name: str | None = None, project_id: str | None = None) -> str:
    """The exact bucket a card lives in, as one string."""
    if user_id is not None:
        return f"u\x1f{user_id}\x1f{normalize_agent(agent_name)}"
    if not project_id:
        raise ValueError("a scope needs a user_id or a project_id")
    return f"p\x1f{project_id}"


def scope_term(bucket: str) -> str:
    """The single FTS term standing for a bucket (letters and digits only, so the FTS
    tokenizer keeps it whole)."""
    return "s" + hashlib.sha256(bucket.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def card_bucket(card: Card) -> str:
    if card.user_id is not None:
        return bucket_key(user_id=card.user_id, agent_name=card.agent_name)
    return bucket_key(project_id=card.project_id)


def _iso(card: Card) -> str:
    return card.created_at.isoformat()


def signature(card: Card) -> str:
    """Digest of everything the index holds for a card (what `drift` compares)."""
    parts = (
        str(SCHEMA_VERSION),
        card_bucket(card),
        card.category.value,
        repr(card.confidence),
        _iso(card),
        card.expires_at.isoformat() if card.expires_at else "",
        card.content,
    )
    return hashlib.sha1("\x1e".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def indexed(card: Card) -> bool:
    """Which cards the index holds: the active ones. Cards past `expires_at` stay until
    they are expired for good and are filtered out at query time (so that whether a card
    is indexed never depends on the clock)."""
    return card.status == CardStatus.ACTIVE


# Terms of recently written contents: `prepare` tokenizes a batch while its files are
# being fsynced, `update` then finds the terms here. Bounded; a miss only costs time.
_recent_terms: dict[str, str] = {}
_RECENT_TERMS = 4096


def _terms(content: str) -> str:
    terms = _recent_terms.get(content)
    if terms is None:
        terms = document_terms(content)
        if len(_recent_terms) >= _RECENT_TERMS:
            _recent_terms.clear()
        _recent_terms[content] = terms
    return terms


def row_for(card: Card, terms: str | None = None) -> tuple:
    if terms is None:
        terms = _terms(card.content)
    bucket = card_bucket(card)
    return (
        card.id,
        scope_term(bucket),
        bucket,
        card.user_id,
        card.agent_name if card.user_id is not None else None,
        card.project_id if card.user_id is None else None,
        card.category.value,
        card.confidence,
        _iso(card),
        card.created_at.timestamp(),
        card.expires_at.timestamp() if card.expires_at else None,
        card.content,
        terms,
        len(terms.split()),
        signature(card),
    )


def scan_terms(card: Card) -> str | None:
    """Run in the scanning processes of `facts.mirror.snapshot`: tokenizing there puts
    the jieba work of a rebuild on every core."""
    return document_terms(card.content) if indexed(card) else None


# --- connections --------------------------------------------------------------------


def index_path() -> Path:
    return Path(settings.MEMORY_ROOT) / INDEX_DIR / INDEX_FILE


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
    return conn


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
    conn.executescript(_SCHEMA)
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


# --- writes -------------------------------------------------------------------------


def _fill(conn: sqlite3.Connection, snap: FileSnapshot, progress: Progress | None = None) -> int:
    """Replace the whole content of the index by the active cards of `snap`, in one
    transaction (readers see the old index until it commits)."""
    items = [item for item in snap.cards.values() if item.card is not None and indexed(item.card)]
    total = len(items)
    freq: Counter[str] = Counter()
    tokens = 0
    conn.execute("PRAGMA cache_size=-65536")
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("DELETE FROM cards")
        conn.execute("INSERT INTO fts(fts) VALUES('delete-all')")
        step = 5000
        for start in range(0, total, step):
            # Rows are made a chunk at a time: 100k rows at once cost ~100 MB.
            rows = [row_for(item.card, item.extra.get("terms")) for item in items[start : start + step]]  # type: ignore[arg-type]
            for row in rows:
                words = row[_TERMS].split()
                tokens += len(words)
                freq.update(set(words))
            conn.executemany(_INSERT, rows)
            if progress:
                progress(min(start + step, total), total)
        conn.execute("INSERT INTO fts(fts) VALUES('rebuild')")
        conn.execute("DELETE FROM df")
        conn.executemany("INSERT INTO df (term, n) VALUES (?, ?)", freq.items())
        conn.execute("DELETE FROM stats")
        conn.executemany("INSERT INTO stats (name, value) VALUES (?, ?)", [("docs", total), ("tokens", tokens)])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    finally:
        conn.execute("PRAGMA cache_size=-2000")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return total


def _forget(conn: sqlite3.Connection, rid: int, scope: str, terms: str) -> None:
    """Take a row's terms out of the FTS table and the statistics."""
    conn.execute("INSERT INTO fts(fts, rowid, scope, terms) VALUES('delete', ?, ?, ?)", (rid, scope, terms))
    words = terms.split()
    distinct = [(w,) for w in set(words)]
    conn.executemany(_DF_DOWN, distinct)
    conn.executemany("DELETE FROM df WHERE term = ? AND n <= 0", distinct)
    conn.executemany(_STATS_ADD, [("docs", -1), ("tokens", -len(words))])


def _learn(conn: sqlite3.Connection, rid: int, scope: str, terms: str) -> None:
    conn.execute("INSERT INTO fts(rowid, scope, terms) VALUES(?, ?, ?)", (rid, scope, terms))
    words = terms.split()
    conn.executemany(_DF_UP, [(w,) for w in set(words)])
    conn.executemany(_STATS_ADD, [("docs", 1), ("tokens", len(words))])


def _apply(conn: sqlite3.Connection, puts: Sequence[tuple], removals: Iterable[str]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        for fact_id in removals:
            old = conn.execute("SELECT rid, scope, terms FROM cards WHERE id = ?", (fact_id,)).fetchone()
            if old is not None:
                _forget(conn, *old)
                conn.execute("DELETE FROM cards WHERE rid = ?", (old[0],))
        for row in puts:
            old = conn.execute("SELECT rid, scope, terms, sig FROM cards WHERE id = ?", (row[0],)).fetchone()
            if old is None:
                rid = conn.execute(_INSERT, row).lastrowid
                assert rid is not None
            elif old[3] == row[-1]:
                continue
            else:
                rid = old[0]
                _forget(conn, *old[:3])
                conn.execute(_UPDATE, (*row[1:], rid))
            _learn(conn, rid, row[1], row[_TERMS])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def update(written: Sequence[Card], deleted: Sequence[Card]) -> None:
    """Upsert the active cards of `written`, remove the others and the deleted ones."""
    # Tokenize before taking the write lock: the transaction stays short.
    puts = [row_for(card) for card in written if indexed(card)]
    removals = [card.id for card in written if not indexed(card)] + [card.id for card in deleted]
    if puts or removals:
        _retrying(lambda conn: _apply(conn, puts, removals))


def prepare(cards: Sequence[Card]) -> None:
    """The write function's preparation hook: tokenize while the disk works."""
    for card in cards:
        if indexed(card):
            _terms(card.content)


def on_cards_changed(written: Sequence[Card], deleted: Sequence[Card]) -> None:
    """The write function's hook. The files and the mirror are already written when it
    runs, so a failure here must not undo or fail the write: it is logged, and
    ``reindex --check`` shows the card as drift until the next rebuild."""
    try:
        update(written, deleted)
    except Exception:
        log.exception("search index update failed for %d cards; run `manage.py reindex`", len(written) + len(deleted))


# --- rebuild and drift ------------------------------------------------------------------


def rebuild_from_snapshot(snap: FileSnapshot, *, progress: Progress | None = None) -> dict[str, object]:
    """Make the index equal to the files of `snap` (``manage.py reindex``)."""
    started = time.monotonic()
    path = index_path()
    make_private_dirs(path.parent)
    _close_handle()
    with _rebuild_lock(path):
        conn: sqlite3.Connection | None = None
        try:
            conn = _connect(path)
            if not _schema_ok(conn):
                raise sqlite3.DatabaseError("no such table: outdated schema")
        except sqlite3.DatabaseError as exc:
            if conn is not None:
                conn.close()
            if not is_corruption(exc) and "outdated" not in str(exc):
                raise
            _remove_files(path)
            conn = _connect(path)
            _create_schema(conn)
        try:
            count = _fill(conn, snap, progress)
        finally:
            conn.close()
    return {"indexed": count, "index_seconds": round(time.monotonic() - started, 3)}


def indexed_signatures() -> dict[str, str] | None:
    """id → signature of every row, or None when there is no usable index file."""
    path = index_path()
    if not path.exists():
        return None
    try:
        conn = _connect(path)
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                return {}
            return dict(conn.execute("SELECT id, sig FROM cards").fetchall())
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        if is_corruption(exc):
            return None
        raise


def drift(snap: FileSnapshot) -> Drift:
    """Files vs index. Changes nothing: a missing or corrupt index shows every card as
    missing (it is rebuilt on first use or by ``reindex``)."""
    result = Drift(unreadable=list(snap.unreadable))
    expected = {fid: item.card for fid, item in snap.cards.items() if item.card is not None and indexed(item.card)}
    actual = indexed_signatures() or {}
    for fact_id, card in expected.items():
        sig = actual.get(fact_id)
        if sig is None:
            result.missing.append(fact_id)
        elif sig != signature(card):
            result.changed.append(fact_id)
    result.extra.extend(sorted(set(actual) - set(expected)))
    result.missing.sort()
    result.changed.sort()
    return result


# --- reads --------------------------------------------------------------------------


def _match(terms: Sequence[str], scopes: Sequence[str]) -> str:
    scope = " OR ".join(quote(scope_term(b)) for b in scopes)
    words = " OR ".join(quote(t) for t in terms)
    return f"scope : ({scope}) AND terms : ({words})"


_SEARCH = """
SELECT c.id, c.content, c.category, c.confidence, c.created_at, c.terms, c.dl, c.bucket
FROM fts JOIN cards AS c ON c.rid = fts.rowid
WHERE fts MATCH ? AND (c.expires_ts IS NULL OR c.expires_ts > ?)
"""
BM25_K1 = 1.2
BM25_B = 0.75


def _idf(docs: int, n: int) -> float:
    # FTS5's definition, including its floor for terms in more than half the rows.
    idf = math.log((docs - n + 0.5) / (n + 0.5))
    return idf if idf > 0 else 1e-6


def candidates(terms: Sequence[str], buckets: Sequence[str], *, limit: int, now_ts: float) -> list[tuple]:
    """The `limit` best BM25 matches of `terms` inside `buckets`, best first: rows of
    (id, content, category, confidence, created_at, bm25). bm25 is FTS5's formula
    (k1 = 1.2, b = 0.75, lower is better), computed from the index's own statistics."""
    if not terms or not buckets:
        return []
    query = _match(terms, buckets)
    allowed = set(buckets)
    marks = ", ".join("?" * len(terms))

    def run(conn: sqlite3.Connection) -> tuple[list[tuple], dict[str, int], dict[str, int]]:
        rows = conn.execute(_SEARCH, (query, now_ts)).fetchall()
        if not rows:
            return rows, {}, {}
        freq = dict(conn.execute(f"SELECT term, n FROM df WHERE term IN ({marks})", tuple(terms)).fetchall())
        totals = dict(conn.execute("SELECT name, value FROM stats").fetchall())
        return rows, freq, totals

    result = _retrying(run)
    assert isinstance(result, tuple)
    rows, freq, totals = result
    if not rows:
        return []
    docs = max(int(totals.get("docs", 0)), 1)
    avgdl = max(int(totals.get("tokens", 0)), 1) / docs
    weights = {t: _idf(docs, freq.get(t, 0)) for t in terms}
    scored = []
    for fact_id, content, category, confidence, created_at, text, dl, bucket in rows:
        # The scope term is a hash: the exact bucket is checked too, so a collision
        # could never show one user another user's facts.
        if bucket not in allowed:
            continue
        norm = BM25_K1 * (1 - BM25_B + BM25_B * dl / avgdl)
        words = text.split()
        total = 0.0
        for term, idf in weights.items():
            tf = words.count(term)
            if tf:
                total += idf * tf * (BM25_K1 + 1) / (tf + norm)
        scored.append((fact_id, content, category, confidence, created_at, -total))
    scored.sort(key=lambda row: (row[5], row[0]))
    return scored[:limit]


def bucket_queues(buckets: Sequence[str], now_ts: float) -> tuple[list[str], list[str], list[str]]:
    """The ids of `buckets`' live cards as two queues, corrections and the rest, each by
    confidence (desc) then id, plus the ids of the cards past their `expires_at`. Read
    from a covering index, ids only: the render asks for the few contents it shows
    with `contents`."""
    if not buckets:
        return [], [], []
    marks = ", ".join("?" * len(buckets))
    where = f"bucket IN ({marks})" if len(buckets) > 1 else "bucket = ?"
    live = "(expires_ts IS NULL OR expires_ts > ?)"
    order = "ORDER BY confidence DESC, id"
    args = (*buckets, now_ts)

    def run(conn: sqlite3.Connection) -> tuple[list[str], list[str], list[str]]:
        def ids(sql: str) -> list[str]:
            # One string per queue instead of a Python row per card (a third of the
            # time at 1,000 cards); SQLite aggregates the ordered subquery in order.
            joined = conn.execute(f"SELECT group_concat(id, ' ') FROM ({sql})", args).fetchone()[0]
            return joined.split() if joined else []

        return (
            ids(f"SELECT id FROM cards WHERE {where} AND {live} AND category = 'correction' {order}"),
            ids(f"SELECT id FROM cards WHERE {where} AND {live} AND category <> 'correction' {order}"),
            ids(f"SELECT id FROM cards WHERE {where} AND NOT {live} {order}"),
        )

    result = _retrying(run)
    assert isinstance(result, tuple)
    return result


def contents(ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """id → (category, content)."""
    if not ids:
        return {}
    marks = ", ".join("?" * len(ids))
    sql = f"SELECT id, category, content FROM cards WHERE id IN ({marks})"
    rows = _retrying(lambda conn: conn.execute(sql, tuple(ids)).fetchall())
    assert isinstance(rows, list)
    return {fact_id: (category, content) for fact_id, category, content in rows}


def count() -> int:
    return int(_retrying(lambda conn: conn.execute("SELECT count(*) FROM cards").fetchone()[0]))  # type: ignore[arg-type]
