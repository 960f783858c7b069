"""Reads of the search index: lexical BM25 candidates, vector ranking, and the rows
the render and the search show, each through this thread's connection
(`retrieval.indexconn.retrying`).
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from . import embedding
from .dates import Day
from .indexconn import retrying
from .indexdb import QUEUE_CORRECTIONS, QUEUE_OTHERS
from .indexrows import scope_term
from .tokenize import quote
from .vectorcache import LOOKUP_BATCH, VECTORS_OF, chunks

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


def lexical(terms: Sequence[str], buckets: Sequence[str], *, limit: int, now_ts: float) -> tuple[list[tuple], float]:
    """The `limit` best BM25 matches of `terms` inside `buckets`, best first: rows of
    (id, content, category, confidence, created_at, bm25). bm25 is FTS5's formula
    (k1 = 1.2, b = 0.75, lower is better), computed from the index's own statistics.
    And the query's weight: the sum of its terms' idf, which is about
    the bm25 of a card of average length holding each term once (search divides by it,
    so that a card matching all of a query's rare words scores near 1 whatever the
    query)."""
    if not terms or not buckets:
        return [], 0.0
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

    result = retrying(run)
    assert isinstance(result, tuple)
    rows, freq, totals = result
    if not rows:
        return [], 0.0
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
    return scored[:limit], sum(weights.values())


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
    # Each queue is one range of the covering ``cards_bucket`` index (bucket, queue,
    # confidence DESC, id), the expired cards one of ``cards_expiring``: at 1,000 cards
    # in a bucket, three walks of the whole bucket cost ~0.3 ms, these ~0.17.
    queue = f"SELECT id FROM cards WHERE {where} AND queue = {{}} AND {live} {order}"
    past = f"SELECT id FROM cards WHERE {where} AND expires_ts IS NOT NULL AND expires_ts <= ? {order}"

    def run(conn: sqlite3.Connection) -> tuple[list[str], list[str], list[str]]:
        def ids(sql: str) -> list[str]:
            # One string per queue instead of a Python row per card (a third of the
            # time at 1,000 cards); SQLite aggregates the ordered subquery in order.
            joined = conn.execute(f"SELECT group_concat(id, ' ') FROM ({sql})", args).fetchone()[0]
            return joined.split() if joined else []

        return (
            ids(queue.format(QUEUE_CORRECTIONS)),
            ids(queue.format(QUEUE_OTHERS)),
            ids(past),
        )

    result = retrying(run)
    assert isinstance(result, tuple)
    return result


def contents(ids: Sequence[str], buckets: Sequence[str] = ()) -> dict[str, tuple[str, str, int | None]]:
    """id → (category, content, tokens of its fact line after the category). With the
    `buckets` the ids are in (the render), the rows are found through the bucket index:
    a bucket's entries there, and its rows in the table, lie together, where the ids
    lie scattered over the id index (a page read each when the pages are cold: ~60 µs
    of a 25-fact render's ~0.4 ms)."""
    if not ids:
        return {}
    marks = ", ".join("?" * len(ids))
    args: tuple[str, ...] = tuple(ids)
    sql = f"SELECT id, category, content, ntok FROM cards WHERE id IN ({marks})"
    if buckets:
        where = ", ".join("?" * len(buckets))
        sql = f"SELECT id, category, content, ntok FROM cards INDEXED BY cards_bucket WHERE bucket IN ({where}) AND id IN ({marks})"
        args = (*buckets, *ids)
    rows = retrying(lambda conn: conn.execute(sql, args).fetchall())
    assert isinstance(rows, list)
    return {row[0]: row[1:] for row in rows}


def said_on(days: Sequence[Day], buckets: Sequence[str], *, limit: int, now_ts: float) -> list[str]:
    """The ids of `buckets`' live cards said on one of `days` (their `created_at`, as
    stored: the day of the time the words were said), at most `limit`, newest first."""
    if not days or not buckets:
        return []
    scope = ", ".join("?" * len(buckets))
    whole = [d.prefix() for d in days if d.year is not None]
    month_day = [d.prefix() for d in days if d.year is None]
    tests = []
    if whole:
        tests.append(f"substr(created_at, 1, 10) IN ({', '.join('?' * len(whole))})")
    if month_day:
        tests.append(f"substr(created_at, 6, 5) IN ({', '.join('?' * len(month_day))})")
    sql = (
        f"SELECT id FROM cards INDEXED BY cards_bucket WHERE bucket IN ({scope}) "
        f"AND (expires_ts IS NULL OR expires_ts > ?) AND ({' OR '.join(tests)}) "
        "ORDER BY created_ts DESC, id LIMIT ?"
    )
    args = (*buckets, now_ts, *whole, *month_day, limit)
    rows = retrying(lambda conn: conn.execute(sql, args).fetchall())
    assert isinstance(rows, list)
    return [row[0] for row in rows]


def count() -> int:
    return int(retrying(lambda conn: conn.execute("SELECT count(*) FROM cards").fetchone()[0]))  # type: ignore[call-overload]


def card_fields(ids: Sequence[str]) -> dict[str, tuple[str, str, float, str]]:
    """id → (content, category, confidence, created_at) of the rows of `ids`."""
    if not ids:
        return {}
    marks = ", ".join("?" * len(ids))
    sql = f"SELECT id, content, category, confidence, created_at FROM cards WHERE id IN ({marks})"
    rows = retrying(lambda conn: conn.execute(sql, tuple(ids)).fetchall())
    assert isinstance(rows, list)
    return {row[0]: tuple(row[1:]) for row in rows}


def vector_scores(query: str, buckets: Sequence[str], *, now_ts: float) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The live cards of `buckets` that have a vector: their ids, cosine similarities to
    `query` and how much each card is itself a question (`_scope_scores`)."""
    if not buckets:
        return [], np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.float32)
    embedding.query_vector(query)  # embed before touching the index: a retry must not embed twice
    result = retrying(lambda conn: _scope_scores(conn, query, buckets, now_ts=now_ts))
    assert isinstance(result, tuple)
    return result


# --- a scope's cards ranked by their vectors -------------------------------------------
# Searches are scoped to one user × agent (tens to a thousand cards): their vectors are
# scored by brute force, one small matrix product, no vector index needed.

_BUCKET_HASHES = """
SELECT id, vhash FROM cards
WHERE bucket IN ({marks}) AND vhash IS NOT NULL AND (expires_ts IS NULL OR expires_ts > ?)
ORDER BY id
"""


# The scopes' matrices, by bucket list, while their (id, vhash) list is unchanged: the
# check reads a covering index (no blobs); a changed scope is read again. Bounded by
# rows (8,192 × 2 KB = 16 MB), least recently used out first.
_MATRIX_ROWS = 8192
_matrices: OrderedDict[tuple[str, ...], tuple[list[tuple[str, str]], np.ndarray, np.ndarray]] = OrderedDict()
_matrices_lock = threading.Lock()
_matrix_rows = 0  # rows held by `_matrices`


def _scope_matrix(
    conn: sqlite3.Connection, buckets: Sequence[str], now_ts: float
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The scope's ids, their vectors and their question-ness (`question_direction`)."""
    key = tuple(buckets)
    marks = ", ".join("?" * len(buckets))
    pairs = conn.execute(_BUCKET_HASHES.format(marks=marks), (*buckets, now_ts)).fetchall()
    with _matrices_lock:
        cached_entry = _matrices.get(key)
        if cached_entry is not None and cached_entry[0] == pairs:
            _matrices.move_to_end(key)
            return [fid for fid, _ in pairs], cached_entry[1], cached_entry[2]
    blobs: dict[str, bytes] = {}
    hashes = list(dict.fromkeys(h for _, h in pairs))
    for chunk in chunks(hashes, LOOKUP_BATCH):
        sql = VECTORS_OF.format(marks=", ".join("?" * len(chunk)))
        blobs.update(conn.execute(sql, tuple(chunk)).fetchall())
    pairs = [(fid, h) for fid, h in pairs if h in blobs]  # a vector lost from the cache: drift
    matrix = embedding.from_blobs([blobs[h] for _, h in pairs])
    questionness = matrix @ embedding.question_direction() if len(pairs) else np.zeros(0, dtype=np.float32)
    global _matrix_rows
    with _matrices_lock:
        old = _matrices.pop(key, None)
        _matrix_rows += len(pairs) - (len(old[0]) if old else 0)
        _matrices[key] = (pairs, matrix, questionness)
        while _matrix_rows > _MATRIX_ROWS and len(_matrices) > 1:
            _matrix_rows -= len(_matrices.popitem(last=False)[1][0])
    return [fid for fid, _ in pairs], matrix, questionness


def _scope_scores(
    conn: sqlite3.Connection, query: str, buckets: Sequence[str], *, now_ts: float
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Every live card of `buckets` that has a vector: (ids in id order, cosine
    similarity to `query`, the card's projection on `question_direction`)."""
    empty = np.zeros(0, dtype=np.float32)
    if not buckets or not query.strip():
        return [], empty, empty
    ids, matrix, questionness = _scope_matrix(conn, buckets, now_ts)
    if not ids:
        return [], empty, empty
    return ids, matrix @ embedding.query_vector(query), questionness
