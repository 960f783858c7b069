"""Embedding many card texts on every core while a rebuild does other work.

Worker processes forked from this one (which loaded the model first, so they share its
weights) embed batches; a thread here stores what they send into the vector cache
(`retrieval.vectorcache`), a transaction a batch. Below `PARALLEL_MIN_TEXTS` texts a
rebuild embeds them itself (`vectorcache.ensure`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sqlite3
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from . import embedding
from .embedding import EmbeddingUnavailable, enabled, to_blob
from .indexdb import BUSY_TIMEOUT_MS
from .vectorcache import attach, cached, store

log = logging.getLogger(__name__)


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
        vecs = embedding.embed([text for _, text in items])
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
        embedding.model()
        embedding.card_path()  # made (and checked) here, so the workers need not
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
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
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
