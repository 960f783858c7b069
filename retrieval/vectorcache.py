"""The vector cache: sentence vectors of card texts, kept by content hash beside the index.

Vectors are a cache of the files, like the FTS rows: ``vectors.sqlite3`` (`retrieval.indexpaths`)
maps a content hash (`embedding.content_hash`: model id + card text) to a float16
vector. The index file attaches it as schema ``vc`` (`attach`) and each index row
names its vector by ``vhash``; so a rebuild, a hand edit or a deleted index file only
embeds texts whose hash is new (`ensure`). A vector no row points at any more is
deleted with its row (erasure must not leave an embedding of erased words behind). The
same file holds the cached terms and scans (`retrieval.derived`, `retrieval.scancache`).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import itemgetter
from pathlib import Path

import numpy as np
from filelock import FileLock

from facts.storage import sqlitegen
from facts.storage.atomic import PRIVATE_FILE_MODE

from . import embedding
from .embedding import DIM, EMBED_BATCH, EmbeddingUnavailable, content_hash, enabled, to_blob
from .indexpaths import VECTORS_FILE

log = logging.getLogger(__name__)


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
# `retrieval.indexconn.retrying`: a corruption error does not say which attached file it
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


def chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def cached(conn: sqlite3.Connection, hashes: Iterable[str]) -> set[str]:
    """Which of `hashes` have a vector in the cache."""
    wanted = list(dict.fromkeys(hashes))
    found: set[str] = set()
    for chunk in chunks(wanted, LOOKUP_BATCH):
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
        vecs = embedding.embed(list(todo.values()))
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
    for chunk in chunks(todo, EMBED_BATCH):
        ready = {h: _recent[h] for h in chunk if h in _recent and not no_cache}
        missing = [h for h in chunk if h not in ready]
        try:
            vecs = embedding.embed([texts[h] for h in missing])
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
    for chunk in chunks(list(dict.fromkeys(hashes)), LOOKUP_BATCH):
        sql = VECTORS_OF.format(marks=", ".join("?" * len(chunk)))
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


VECTORS_OF = "SELECT hash, vec FROM vc.vectors WHERE hash IN ({marks})"
