"""Writing the search index on a connection: a write's rows in and out, and a whole refill.

`apply` replaces the rows of written cards and removes those of deleted ones, keeping
FTS5, the document frequencies (``df``) and the corpus totals (``stats``) in step and
dropping the cached terms, vectors and scans no row names any more (erasure must not
leave erased words behind); `fill` replaces the whole content by the cards of a
snapshot in one transaction (a rebuild). Both work on a connection they are given:
which file that is, and when, is the caller's (`retrieval.index` for the write hook,
`retrieval.indexbuild` for rebuilds).
"""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from itertools import chain

from facts.storage.snapshots import FileSnapshot

from . import derived, embedding, scancache, vectorcache
from .indexdb import CARD_INDEXES
from .indexrows import COLUMNS, CONTENT, DL, NTOK, SIG, TERMS, THASH, VHASH, scanned_rows

Progress = Callable[[int, int], None]


_INSERT = f"INSERT INTO cards ({COLUMNS}) VALUES ({', '.join('?' * 19)})"


_UPDATE = (
    "UPDATE cards SET scope=?, bucket=?, user_id=?, agent_name=?, project_id=?, category=?, confidence=?, "
    "created_at=?, created_ts=?, expires_ts=?, content=?, terms=?, dl=?, sig=?, vhash=?, thash=?, ntok=?, queue=? WHERE rid=?"
)


_DF_UP = "INSERT INTO df (term, n) VALUES (?, 1) ON CONFLICT (term) DO UPDATE SET n = n + 1"
_DF_DOWN = "UPDATE df SET n = n - 1 WHERE term = ?"
_STATS_ADD = (
    "INSERT INTO stats (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = value + excluded.value"
)


def _with_vectors(rows: list[tuple], have: set[str]) -> list[tuple]:
    """`rows` with ``vhash`` cleared where the cache holds no vector (the embedding
    failed): such a row is still found lexically and shows up as vector drift."""
    return [row if row[VHASH] is None or row[VHASH] in have else (*row[:VHASH], None, *row[THASH:]) for row in rows]


def _ensure_vectors(conn: sqlite3.Connection, rows: Sequence[tuple], **options: object) -> set[str]:
    texts = {row[VHASH]: row[CONTENT] for row in rows if row[VHASH] is not None}
    return vectorcache.ensure(conn, texts, **options) if texts else set()  # type: ignore[arg-type]


def fill(
    conn: sqlite3.Connection, snap: FileSnapshot, progress: Progress | None = None, *, no_cache: bool = False
) -> int:
    """Replace the whole content of the index by the active cards of `snap`, in one
    transaction (readers see the old index until it commits). Vectors missing from the
    cache are embedded first, outside that transaction: a cold rebuild of 100k cards
    embeds for minutes, and writers must not wait on it."""
    items = scanned_rows(snap)
    total = len(items)
    have: set[str] = set()
    if embedding.enabled():
        texts = {item.row[VHASH]: item.row[CONTENT] for item in items}
        have = vectorcache.ensure(conn, texts, no_cache=no_cache)
    freq: Counter[str] = Counter()
    tokens = sum(item.row[DL] for item in items)  # ``dl`` is the row's term count

    failed: list[BaseException] = []

    def count_documents() -> None:
        # Document frequencies. On a thread, while the main one waits in SQLite (making
        # the secondary indexes, FTS5's rebuild and optimize: ~1 s with the GIL
        # released) instead of before it: ~0.3-0.5 s of Python off a rebuild's wall time.
        try:
            freq.update(chain.from_iterable(set(item.row[TERMS].split()) for item in items))
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
                [(row[THASH], row[TERMS], row[NTOK]) for row, (t, _) in zip(rows, chunk, strict=True) if t.fresh],
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
        vectorcache.prune(conn)
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


def apply(conn: sqlite3.Connection, puts: Sequence[tuple], removals: Iterable[str]) -> None:
    new_vectors: list[tuple[str, bytes]] = []
    if any(row[VHASH] is not None for row in puts):
        puts = _with_vectors(list(puts), _ensure_vectors(conn, puts, defer=new_vectors))
    conn.execute("BEGIN IMMEDIATE")
    try:
        vectorcache.store(conn, new_vectors)
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
            elif old[3] == row[SIG] and old[4] == row[VHASH]:
                continue
            elif old[3] == row[SIG]:  # same text and fields, only the vector changed
                conn.execute("UPDATE cards SET vhash = ? WHERE rid = ?", (row[VHASH], old[0]))
                dropped.append(old[4])
                continue
            else:
                rid = old[0]
                _relearn(conn, rid, old[1], old[2], row[1], row[TERMS])
                conn.execute(_UPDATE, (*row[1:], rid))
                dropped.append(old[4])
                dropped_terms.append(old[5])
                learned.append((row[THASH], row[TERMS], row[NTOK]))
                continue
            _learn(conn, rid, row[1], row[TERMS])
            learned.append((row[THASH], row[TERMS], row[NTOK]))
        # A card written or removed: what the scan cache knew of its old file goes.
        scancache.forget(conn, [row[0] for row in puts] + list(removals))
        vectorcache.forget_unused(conn, dropped)
        # The write path fills the terms cache too, so a rebuild after it tokenizes nothing.
        derived.store(conn, learned)
        derived.forget_unused(conn, [h for h in dropped_terms if h not in {t for t, _, _ in learned}])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
