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

The index is told about every committed write by `facts.storage.hooks` (`on_cards_changed`),
rebuilt from the files by ``manage.py reindex`` (`rebuild_from_snapshot`), compared
with them by ``reindex --check`` (`drift`), and rebuilt on first use when its file is
missing or corrupt. Each row also names its card's sentence vector (``vhash``, see
`retrieval.vectors`); the file, schema and connections live in `retrieval.indexdb`.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from pathlib import Path
from typing import NamedTuple

from facts.enums import CardStatus
from facts.mirror import Drift, FileSnapshot, Scanned, gc_paused, refresh, snapshot
from facts.storage import sqlitegen
from facts.storage.atomic import make_private_dirs
from facts.storage.cardfile import Card
from facts.storage.ids import normalize_agent
from facts.storage.store import Store

from . import derived, scancache, tokens, vectors
from .indexdb import (  # noqa: F401 - re-exported: callers use `index.connection()` etc.
    CARD_INDEXES,
    INDEX_DIR,
    INDEX_FILE,
    QUEUE_CORRECTIONS,
    QUEUE_OTHERS,
    SCHEMA_VERSION,
    SETTLE_S,
    IndexUnavailable,
    _bad,
    _cannot_open,
    _close_handle,
    _connect,
    _create_schema,
    _discard,
    _rebuild_lock,
    _retrying,
    _schema_ok,
    after_write,
    connection,
    index_path,
    is_corruption,
    request_rebuild,
    reset,
    status,
    wait_for_rebuilds,
)
from .tokenize import load_dictionary

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]

_COLUMNS = (
    "id, scope, bucket, user_id, agent_name, project_id, category, confidence, created_at, created_ts, "
    "expires_ts, content, terms, dl, sig, vhash, thash, ntok, queue"
)
_INSERT = f"INSERT INTO cards ({_COLUMNS}) VALUES ({', '.join('?' * 19)})"
_UPDATE = (
    "UPDATE cards SET scope=?, bucket=?, user_id=?, agent_name=?, project_id=?, category=?, confidence=?, "
    "created_at=?, created_ts=?, expires_ts=?, content=?, terms=?, dl=?, sig=?, vhash=?, thash=?, ntok=?, queue=? WHERE rid=?"
)
_CONTENT = 11  # positions in a row
_TERMS = 12
_DL = 13
_SIG = 14
_VHASH = 15
_THASH = 16
_NTOK = 17
_DF_UP = "INSERT INTO df (term, n) VALUES (?, 1) ON CONFLICT (term) DO UPDATE SET n = n + 1"
_DF_DOWN = "UPDATE df SET n = n - 1 WHERE term = ?"
_STATS_ADD = (
    "INSERT INTO stats (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = value + excluded.value"
)


# --- scopes and rows ----------------------------------------------------------------


def bucket_key(*, user_id: str | None = None, agent_name: str | None = None, project_id: str | None = None) -> str:
    """The exact bucket a card lives in, as one string."""
    if user_id is not None:
        return f"u\x1f{user_id}\x1f{normalize_agent(agent_name)}"
    if not project_id:
        raise ValueError("a scope needs a user_id or a project_id")
    return f"p\x1f{project_id}"


def scopes(user_id: str, agent_name: str | None, project_id: str | None) -> list[str]:
    """The buckets a user × agent (× project) reads: its own, and the project's."""
    buckets = [bucket_key(user_id=user_id, agent_name=agent_name)]
    if project_id:
        buckets.append(bucket_key(project_id=project_id))
    return buckets


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
    expires = card.expires_at.isoformat() if card.expires_at else ""
    return _signature(card_bucket(card), card.category.value, card.confidence, _iso(card), expires, card.content)


def _signature(bucket: str, category: str, confidence: float, created: str, expires: str, content: str) -> str:
    parts = (str(SCHEMA_VERSION), bucket, category, repr(confidence), created, expires, content)
    return hashlib.sha1("\x1e".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def indexed(card: Card) -> bool:
    """Which cards the index holds: the active ones. Cards past `expires_at` stay until
    they are expired for good and are filtered out at query time (so that whether a card
    is indexed never depends on the clock)."""
    return card.status == CardStatus.ACTIVE


# Terms of recently written contents: `prepare` tokenizes a batch while its files are
# being fsynced, `update` then finds the terms here. Bounded; a miss only costs time.
_recent_terms: dict[str, derived.Terms] = {}
_RECENT_TERMS = 4096


def remember_scanned(snap: FileSnapshot) -> None:
    """Keep the terms a rebuild's scan had to compute (new or hand-edited texts) for
    `update`: a hand-edited card is committed again during the rebuild (it gets a
    revision), and that commit tokenized it a second time."""
    for item in snap.cards.values():
        scanned = scanned_row(item)
        if scanned is not None and scanned.terms.fresh:
            if len(_recent_terms) >= _RECENT_TERMS:
                return
            _recent_terms[scanned.row[_CONTENT]] = scanned.terms


def _terms(content: str) -> derived.Terms:
    terms = _recent_terms.get(content)
    if terms is None:
        terms = derived.compute(content)
        if len(_recent_terms) >= _RECENT_TERMS:
            _recent_terms.clear()
        _recent_terms[content] = terms
    return terms


def row_for(card: Card, terms: derived.Terms | None = None) -> tuple:
    if terms is None:
        terms = _terms(card.content)
    text = terms.terms
    # Each part made once: the signature repeats the bucket and the dates.
    bucket = card_bucket(card)
    category = card.category.value
    created = _iso(card)
    expires = card.expires_at
    return (
        card.id,
        scope_term(bucket),
        bucket,
        card.user_id,
        card.agent_name if card.user_id is not None else None,
        card.project_id if card.user_id is None else None,
        category,
        card.confidence,
        created,
        card.created_at.timestamp(),
        expires.timestamp() if expires else None,
        card.content,
        text,
        len(text.split()),
        _signature(bucket, category, card.confidence, created, expires.isoformat() if expires else "", card.content),
        vectors.content_hash(card.content) if vectors.enabled() else None,
        terms.hash,
        terms.ntok,
        QUEUE_CORRECTIONS if category == "correction" else QUEUE_OTHERS,
    )


def _with_vectors(rows: list[tuple], have: set[str]) -> list[tuple]:
    """`rows` with ``vhash`` cleared where the cache holds no vector (the embedding
    failed): such a row is still found lexically and shows up as vector drift."""
    return [row if row[_VHASH] is None or row[_VHASH] in have else (*row[:_VHASH], None, *row[_THASH:]) for row in rows]


def _ensure_vectors(conn: sqlite3.Connection, rows: Sequence[tuple], **options: object) -> set[str]:
    texts = {row[_VHASH]: row[_CONTENT] for row in rows if row[_VHASH] is not None}
    return vectors.ensure(conn, texts, **options) if texts else set()  # type: ignore[arg-type]


def scan_prepare() -> None:
    """Before the scanning processes fork: load jieba once for all of them when the
    scan tokenizes every card. A normal rebuild tokenizes only what the cache lacks, so
    a scanning process loads it on its first miss: loading it up front cost ~1 s of
    serial time and ~100 MB in the parent even when nothing missed."""
    if derived.tokenizes_everything():
        load_dictionary()


class ScanRow(NamedTuple):
    """What a rebuild's scan computes for an indexed card: its terms and its index row."""

    terms: derived.Terms
    row: tuple


def scan_row(card: Card) -> ScanRow | None:
    """Run in the scanning processes of `facts.mirror.snapshot`: the card's index row,
    with the cached terms of its text (else tokenized there). That puts a rebuild's
    jieba work and the rows' hashing (~35 µs a card) on every core, and spares the
    parent the card itself (`facts.mirror.Scanned`). None for a card the index does
    not hold."""
    if not indexed(card):
        return None
    terms = derived.lookup(card.content)
    return ScanRow(terms, row_for(card, terms))


def scanned_row(item: Scanned) -> ScanRow | None:
    """The scan's `ScanRow` of a snapshot item (computed here when the scan had none)."""
    found = item.extra.get(SCAN_EXTRA, item)
    if found is item:
        card = item.card
        found = None if card is None else scan_row(card)
        item.extra[SCAN_EXTRA] = found
    return found


SCAN_EXTRA = "index"

# From this many cards without their rows (a snapshot of cards already in memory), the
# rows are made on every core.
PARALLEL_ROWS = 4000
_ROWS_CHUNK = 2000
_pending: list[Card] = []  # the cards `_rows_of` works on, inherited by the forked workers


def _scan_rows(cards: Sequence[Card]) -> list[ScanRow | None]:
    """`scan_row` of many cards, their cached terms read in batches."""
    live = [card for card in cards if indexed(card)]
    made = iter(
        [ScanRow(t, row_for(c, t)) for c, t in zip(live, derived.lookup_many([c.content for c in live]), strict=True)]
    )
    return [next(made) if indexed(card) else None for card in cards]


def _rows_of(span: tuple[int, int]) -> list[ScanRow | None]:
    """In a worker: the rows of `_pending[start:end]`."""
    return _scan_rows(_pending[span[0] : span[1]])


def scanned_rows(snap: FileSnapshot) -> list[ScanRow]:
    """The `ScanRow` of every card of `snap` the index holds. A snapshot read by the
    scanning processes has them all; the cards of one made in memory (records) get
    theirs here, on every core when there are many, each card's cached terms read in
    batches rather than one query a card."""
    items = list(snap.cards.values())
    todo = [item for item in items if SCAN_EXTRA not in item.extra]
    if todo:
        global _pending
        cards = [item.card for item in todo]
        workers = min(os.cpu_count() or 1, 4)
        if len(cards) >= PARALLEL_ROWS and workers > 1:
            derived.close_reader()  # each worker opens its own
            # Loaded once here, shared by the workers (each would load its own).
            load_dictionary()
            tokens.encoding()
            _pending = cards  # type: ignore[assignment]
            spans = [(i, min(i + _ROWS_CHUNK, len(cards))) for i in range(0, len(cards), _ROWS_CHUNK)]
            try:
                with multiprocessing.get_context("fork").Pool(workers) as pool:
                    rows = list(chain.from_iterable(pool.imap(_rows_of, spans)))
            finally:
                _pending = []
        else:
            rows = _scan_rows(cards)  # type: ignore[arg-type]
        for item, row in zip(todo, rows, strict=True):
            item.extra[SCAN_EXTRA] = row
    return [item.extra[SCAN_EXTRA] for item in items if item.extra[SCAN_EXTRA] is not None]


# --- writes -------------------------------------------------------------------------


def _fill(
    conn: sqlite3.Connection, snap: FileSnapshot, progress: Progress | None = None, *, no_cache: bool = False
) -> int:
    """Replace the whole content of the index by the active cards of `snap`, in one
    transaction (readers see the old index until it commits). Vectors missing from the
    cache are embedded first, outside that transaction: a cold rebuild of 100k cards
    embeds for minutes, and writers must not wait on it."""
    items = scanned_rows(snap)
    total = len(items)
    have: set[str] = set()
    if vectors.enabled():
        texts = {item.row[_VHASH]: item.row[_CONTENT] for item in items}
        have = vectors.ensure(conn, texts, no_cache=no_cache)
    freq: Counter[str] = Counter()
    tokens = sum(item.row[_DL] for item in items)  # ``dl`` is the row's term count

    failed: list[BaseException] = []

    def count_documents() -> None:
        # Document frequencies. On a thread, while the main one waits in SQLite (making
        # the secondary indexes, FTS5's rebuild and optimize: ~1 s with the GIL
        # released) instead of before it: ~0.3-0.5 s of Python off a rebuild's wall time.
        try:
            freq.update(chain.from_iterable(set(item.row[_TERMS].split()) for item in items))
        except BaseException as exc:  # re-raised by the main thread: no partial df
            failed.append(exc)

    counting = threading.Thread(target=count_documents, name="index-df", daemon=True)
    conn.execute("PRAGMA cache_size=-65536")
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("DELETE FROM cards")
        conn.execute("INSERT INTO fts(fts) VALUES('delete-all')")
        # The secondary indexes are dropped and made again after the rows are in: one
        # sort each instead of 100k scattered b-tree inserts (~0.6 s of ~1.4 at 100k).
        # Readers see the old index, and its indexes, until the commit.
        for name in CARD_INDEXES:
            conn.execute(f"DROP INDEX IF EXISTS {name}")
        step = 5000
        for start in range(0, total, step):
            # Rows are made a chunk at a time: 100k rows at once cost ~100 MB.
            chunk = items[start : start + step]
            rows = _with_vectors([item.row for item in chunk], have)
            # Terms the scan had to compute go into the cache for the next rebuild.
            derived.store(
                conn,
                [(row[_THASH], row[_TERMS], row[_NTOK]) for row, (t, _) in zip(rows, chunk, strict=True) if t.fresh],
            )
            conn.executemany(_INSERT, rows)
            if progress:
                progress(min(start + step, total), total)
        counting.start()
        for sql in CARD_INDEXES.values():
            conn.execute(sql)
        conn.execute("INSERT INTO fts(fts) VALUES('rebuild')")
        # Leave one segment: right after a 'rebuild', FTS5's automerge folded the fresh
        # segments into the first updates' commits (CPU p99 12 ms at 100k rows, 2 ms
        # once merged). Merging here costs ~0.15 s at 100k.
        conn.execute("INSERT INTO fts(fts) VALUES('optimize')")
        counting.join()
        if failed:
            raise failed[0]
        conn.execute("DELETE FROM df")
        conn.executemany("INSERT INTO df (term, n) VALUES (?, ?)", freq.items())
        conn.execute("DELETE FROM stats")
        conn.executemany("INSERT INTO stats (name, value) VALUES (?, ?)", [("docs", total), ("tokens", tokens)])
        # Vectors and terms of texts no card holds any more (edited, expired, erased) go too.
        vectors.prune(conn)
        derived.prune(conn)
        scancache.store(conn, snap)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    finally:
        conn.execute("PRAGMA cache_size=-2000")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA vc.wal_checkpoint(TRUNCATE)")
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


def _relearn(conn: sqlite3.Connection, rid: int, old_scope: str, old_terms: str, scope: str, terms: str) -> None:
    """A row whose terms changed: FTS5 takes it out and in again, but the statistics
    move only by the difference. Forgetting every old term and learning every new one
    rewrote a ``df`` page per distinct term (~40 for a card), though an edit changes a
    few: those pages were most of what the commit wrote to the WAL."""
    conn.execute("INSERT INTO fts(fts, rowid, scope, terms) VALUES('delete', ?, ?, ?)", (rid, old_scope, old_terms))
    conn.execute("INSERT INTO fts(rowid, scope, terms) VALUES(?, ?, ?)", (rid, scope, terms))
    old_words, words = old_terms.split(), terms.split()
    old_set, new_set = set(old_words), set(words)
    gone = [(w,) for w in old_set - new_set]
    conn.executemany(_DF_DOWN, gone)
    conn.executemany("DELETE FROM df WHERE term = ? AND n <= 0", gone)
    conn.executemany(_DF_UP, [(w,) for w in new_set - old_set])
    if len(words) != len(old_words):
        conn.execute(_STATS_ADD, ("tokens", len(words) - len(old_words)))


def _apply(conn: sqlite3.Connection, puts: Sequence[tuple], removals: Iterable[str]) -> None:
    new_vectors: list[tuple[str, bytes]] = []
    if any(row[_VHASH] is not None for row in puts):
        puts = _with_vectors(list(puts), _ensure_vectors(conn, puts, defer=new_vectors))
    conn.execute("BEGIN IMMEDIATE")
    try:
        vectors.store(conn, new_vectors)
        dropped: list[str] = []
        dropped_terms: list[str] = []
        learned: list[tuple[str, str, int]] = []
        for fact_id in removals:
            old = conn.execute("SELECT rid, scope, terms, vhash, thash FROM cards WHERE id = ?", (fact_id,)).fetchone()
            if old is not None:
                _forget(conn, *old[:3])
                conn.execute("DELETE FROM cards WHERE rid = ?", (old[0],))
                dropped.append(old[3])
                dropped_terms.append(old[4])
        for row in puts:
            old = conn.execute(
                "SELECT rid, scope, terms, sig, vhash, thash FROM cards WHERE id = ?", (row[0],)
            ).fetchone()
            if old is None:
                rid = conn.execute(_INSERT, row).lastrowid
                assert rid is not None
            elif old[3] == row[_SIG] and old[4] == row[_VHASH]:
                continue
            elif old[3] == row[_SIG]:  # same text and fields, only the vector changed
                conn.execute("UPDATE cards SET vhash = ? WHERE rid = ?", (row[_VHASH], old[0]))
                dropped.append(old[4])
                continue
            else:
                rid = old[0]
                _relearn(conn, rid, old[1], old[2], row[1], row[_TERMS])
                conn.execute(_UPDATE, (*row[1:], rid))
                dropped.append(old[4])
                dropped_terms.append(old[5])
                learned.append((row[_THASH], row[_TERMS], row[_NTOK]))
                continue
            _learn(conn, rid, row[1], row[_TERMS])
            learned.append((row[_THASH], row[_TERMS], row[_NTOK]))
        # A card written or removed: what the scan cache knew of its old file goes.
        scancache.forget(conn, [row[0] for row in puts] + list(removals))
        vectors.forget_unused(conn, dropped)
        # The write path fills the terms cache too, so a rebuild after it tokenizes nothing.
        derived.store(conn, learned)
        derived.forget_unused(conn, [h for h in dropped_terms if h not in {t for t, _, _ in learned}])
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
        # A write never waits for a rebuild: the rebuild's catch-up reads these files.
        _retrying(lambda conn: _apply(conn, puts, removals), writing=True)
        after_write(index_path())


def prepare(cards: Sequence[Card]) -> None:
    """The write function's preparation hook: tokenize and embed while the disk works."""
    live = [card.content for card in cards if indexed(card)]
    for content in live:
        _terms(content)
    vectors.prepare(live)


def on_cards_changed(written: Sequence[Card], deleted: Sequence[Card]) -> None:
    """The write function's hook. The files and the mirror are already written when it
    runs, so a failure here must not undo or fail the write: it is logged, and
    ``reindex --check`` shows the card as drift until the next rebuild."""
    try:
        update(written, deleted)
    except IndexUnavailable as exc:
        # Committed under the commit gate, so the rebuild's catch-up (which holds it
        # exclusively) reads these files: nothing is lost.
        log.info("search index not written for %d cards (%s)", len(written) + len(deleted), exc.message)
    except Exception:
        log.exception("search index update failed for %d cards; run `manage.py reindex`", len(written) + len(deleted))


# --- rebuild and drift ------------------------------------------------------------------


def embed_ahead(snap: FileSnapshot, *, no_cache: bool = False) -> vectors.Embedding | None:
    """Start embedding the cards of `snap` whose vector the cache lacks (all of them
    with `no_cache`) on every core, while the caller does other work (the mirror);
    `rebuild_from_snapshot(..., ahead=)` waits for it. None when there is little to
    embed: the rebuild does that itself."""
    if not vectors.enabled():
        return None
    texts = {s.row[_VHASH]: s.row[_CONTENT] for s in scanned_rows(snap)}
    path = index_path()
    make_private_dirs(path.parent)
    return vectors.embed_in_background(texts, path.parent, no_cache=no_cache)


def rebuild_from_snapshot(
    snap: FileSnapshot,
    *,
    progress: Progress | None = None,
    no_cache: bool = False,
    ahead: vectors.Embedding | None = None,
    embedding_progress: Progress | None = None,
) -> dict[str, object]:
    """Make the index equal to the files of `snap` (``manage.py reindex``); with
    `no_cache`, every vector is embedded again instead of taken from the cache. The
    vectors the cache lacks are embedded on every core first (`embed_ahead`, or `ahead`
    when the caller started it), with `embedding_progress`.

    A usable index is refilled in place, in one transaction (readers see the old rows
    until it commits); a missing, corrupt or outdated one is replaced by a new
    generation, published when full. The caller catches up with the commits made since
    `snap` was taken (`facts.mirror.catch_up`)."""
    started = time.monotonic()
    if ahead is None:
        ahead = embed_ahead(snap, no_cache=no_cache)
    if ahead is not None:
        ahead.wait(embedding_progress)
        no_cache = False  # every vector was just made: the fill finds them
    path = index_path()
    make_private_dirs(path.parent)
    _close_handle()
    derived.close_reader()
    with _rebuild_lock(path), gc_paused():
        conn = _open_usable(path)
        fresh: Path | None = None
        if conn is None:
            fresh = sqlitegen.fresh(path)
            conn = _connect(fresh, create=True)
            _create_schema(conn)
        try:
            count = _fill(conn, snap, progress, no_cache=no_cache)
        except BaseException:
            conn.close()
            if fresh is not None:
                _discard(fresh)
            raise
        conn.close()
        if fresh is not None:
            sqlitegen.publish(path, fresh)
        sqlitegen.sweep(path, settled_s=SETTLE_S)
    return {"indexed": count, "index_seconds": round(time.monotonic() - started, 3)}


def _open_usable(path: Path) -> sqlite3.Connection | None:
    """A connection to the current generation when it can be refilled in place."""
    current = sqlitegen.target(path)
    if current is None or sqlitegen.identity(current) in _bad:
        return None
    conn: sqlite3.Connection | None = None
    try:
        conn = _connect(current)
        if _schema_ok(conn):
            return conn
    except sqlite3.DatabaseError as exc:
        if not (is_corruption(exc) or _cannot_open(exc)):
            if conn is not None:
                conn.close()
            raise
    if conn is not None:
        conn.close()
    return None


def build_generation(path: Path, store: Store) -> int:
    """A new generation of the index at `path` from the files, published once it holds
    every commit (the background rebuild of a missing, corrupt or outdated index, run
    with ``rebuild.lock`` held). The scan runs in this process (no fork: the caller may
    be a threaded web server). Commits made meanwhile are read again under the commit
    gate, held exclusively, and the link moves under it too: every commit either
    reached the files before that catch-up or writes to the new generation."""
    fresh = sqlitegen.fresh(path)
    conn = _connect(fresh, create=True)
    try:
        _create_schema(conn)
        snap = snapshot(store, workers=1)
        count = _fill(conn, snap)
        # `refresh` updates the snapshot it is given: a copy, the caller's stays as read.
        later = FileSnapshot(dict(snap.cards), dict(snap.profiles), list(snap.unreadable), snap.started_ns)
        with store.commit_gate(exclusive=True):
            changed, gone = refresh(store, later)
            puts = [row_for(card) for card in changed if indexed(card)]
            removals = [card.id for card in changed if not indexed(card)] + [card.id for card in gone]
            if puts or removals:
                _apply(conn, puts, removals)
            sqlitegen.publish(path, fresh)
    except BaseException:
        conn.close()
        _discard(fresh)
        raise
    conn.close()
    sqlitegen.sweep(path, settled_s=SETTLE_S)
    return count


def _open_current() -> sqlite3.Connection | None:
    """A connection to the current generation for a check (None when there is none): a
    check never builds a missing index."""
    current = sqlitegen.target(index_path())
    if current is None:
        return None
    try:
        return _connect(current)
    except sqlite3.DatabaseError as exc:
        if is_corruption(exc) or _cannot_open(exc):
            return None
        raise


def indexed_signatures() -> dict[str, str] | None:
    """id → signature of every row, or None when there is no usable index file."""
    try:
        conn = _open_current()
        if conn is None:
            return None
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


def _live_rows(snap: FileSnapshot) -> dict[str, ScanRow]:
    """id → `ScanRow` of the snapshot's cards the index should hold."""
    rows = {fid: scanned_row(item) for fid, item in snap.cards.items()}
    return {fid: scanned for fid, scanned in rows.items() if scanned is not None}


def drift(snap: FileSnapshot) -> Drift:
    """Files vs index. Changes nothing: a missing or corrupt index shows every card as
    missing (it is rebuilt on first use or by ``reindex``)."""
    result = Drift(unreadable=list(snap.unreadable))
    expected = _live_rows(snap)
    actual = indexed_signatures() or {}
    for fact_id, scanned in expected.items():
        sig = actual.get(fact_id)
        if sig is None:
            result.missing.append(fact_id)
        elif sig != scanned.row[_SIG]:
            result.changed.append(fact_id)
    result.extra.extend(sorted(set(actual) - set(expected)))
    result.missing.sort()
    result.changed.sort()
    return result


def vector_drift(snap: FileSnapshot) -> Drift | None:
    """Files vs vectors (None when embeddings are off): a card with no vector, or none
    in the cache, is missing; one whose vector was made from other text is changed."""
    if not vectors.enabled():
        return None
    result = Drift()
    # A row's vhash is its text's content hash whenever embeddings are on (`row_for`).
    expected = {fid: scanned.row[_VHASH] for fid, scanned in _live_rows(snap).items()}
    actual: dict[str, tuple[str | None, int]] = {}
    try:
        conn = _open_current()
        if conn is not None:
            try:
                if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
                    sql = (
                        "SELECT c.id, c.vhash, v.hash IS NOT NULL FROM cards AS c "
                        "LEFT JOIN vc.vectors AS v ON v.hash = c.vhash"
                    )
                    actual = {fid: (vhash, present) for fid, vhash, present in conn.execute(sql)}
            finally:
                conn.close()
    except sqlite3.DatabaseError as exc:
        if not is_corruption(exc):
            raise
    for fact_id, wanted in expected.items():
        vhash, present = actual.get(fact_id, (None, 0))
        if vhash is not None and vhash != wanted:
            result.changed.append(fact_id)
        elif vhash is None or not present:
            result.missing.append(fact_id)
    result.missing.sort()
    result.changed.sort()
    return result


def cache_drift(snap: FileSnapshot) -> Drift:
    """The cache of derived data vs the files (``reindex --check``). The scan ran in
    `derived.mode("verify")`, tokenizing every card again: a cached terms entry that
    differs is changed. A cached vector of the wrong size or with non-finite values is
    changed too (re-embedding every card to compare would take minutes). Entries that
    are merely absent are not drift: the next write or rebuild fills them."""
    result = Drift()
    live = _live_rows(snap)
    for fact_id, scanned in live.items():
        if scanned.terms.corrupt:
            result.changed.append(fact_id)
    conn = _open_current()  # a check never builds a missing index
    if conn is not None:
        try:
            result.changed.extend(scancache.drift(conn, snap))
            if vectors.enabled():
                wanted: dict[str, list[str]] = {}
                for fact_id, scanned in live.items():
                    wanted.setdefault(scanned.row[_VHASH], []).append(fact_id)
                bad = set(vectors.malformed(conn, wanted))
                result.changed.extend(fid for h in bad for fid in wanted[h])
        finally:
            conn.close()
    result.changed = sorted(set(result.changed))
    return result


# The reads live in `retrieval.reads`; re-exported here, where callers (and tests that
# replace them) have always found them.
from .reads import (  # noqa: E402, F401
    _match,
    bucket_queues,
    candidates,
    card_fields,
    contents,
    count,
    lexical,
    vector_ranking,
    vector_scores,
)
