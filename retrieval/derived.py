"""The cache of derived per-card data, keyed by content hash (issue 23).

Re-tokenizing text that has not changed was most of a rebuild's time (jieba ≈ 85 µs of
≈ 190 µs per card), and re-embedding it would be far worse (≈ 1,300 cards/s). So both
are cached beside the index, in ONE file (``MEMORY_ROOT/.retrieval/vectors.sqlite3``,
attached to every index connection as schema ``vc``; the name predates the tokens):

``vc.terms``    hash of (tokenizer version, text) → the index terms of that text;
``vc.vectors``  hash of (model id, text) → its sentence vector (`retrieval.vectorcache`).

Every index row names both hashes (``thash``, ``vhash``); an entry no row names any
more is deleted with its last row, so erased words do not linger in the cache. The file
is derived data: deleting it only costs the next rebuild its speed, and
``reindex --no-cache`` ignores it (and writes it afresh).

A rebuild's scanning processes (`facts.storage.snapshots.snapshot`) look the terms up here
before tokenizing, each through its own read-only connection; ``reindex --check``
tokenizes every card again and reports entries that disagree.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from .factline import fact_tail_tokens
from .indexpaths import VECTORS_FILE, index_path, vectors_link
from .tokenize import document_terms

# Part of every terms hash: bump it whenever `document_terms` would give other tokens
# (dictionary, stemmer, stop-words in documents) or `factline.fact_tail` another line, and
# every cached entry is a miss.
TOKENIZER_ID = "jieba-snowball-cl100k-2"
CACHE_FILE = VECTORS_FILE

# The table itself is created with the vectors' when the file is attached
# (`retrieval.vectorcache.attach`).


def terms_hash(text: str) -> str:
    return hashlib.sha256(f"{TOKENIZER_ID}\x1e{text}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


class Terms(NamedTuple):
    """A card's index terms as the scan found them: `fresh` when they were computed
    (the cache missed, or was bypassed) and so still need to be stored; `corrupt` when
    ``--check`` found the cached entry differs from what the tokenizer says now."""

    hash: str
    terms: str
    ntok: int  # tokens of the card's fact line after its category (`factline.fact_tail_tokens`)
    fresh: bool = True
    corrupt: bool = False


# How the scanning processes use the cache: "use" (normal), "bypass" (--no-cache) or
# "verify" (--check). Set in the parent before the workers fork; they inherit it.
_mode = "use"


@contextlib.contextmanager
def mode(value: str) -> Iterator[None]:
    global _mode
    assert value in ("use", "bypass", "verify")
    old, _mode = _mode, value
    try:
        yield
    finally:
        _mode = old


def tokenizes_everything() -> bool:
    """Whether a scan in this mode tokenizes every card (--no-cache, --check)."""
    return _mode != "use"


# One read-only connection per process (a forked worker opens its own), checked by pid
# and the raw settings that place the cache: building its Path per card (as
# `_cache_path` does) cost ~35 µs, more than the lookup itself, in every scanning worker.
# Entries are immutable (the key is the text's hash), so a reader left on a replaced
# file reads nothing wrong; rebuilds close it anyway (`close_reader`).
_reader: tuple[int, object, object, sqlite3.Connection | None] | None = None


READ_MMAP_BYTES = 1 << 30  # SQLite maps no more than the file's size


def _cache_path() -> Path:
    # Beside the index, wherever it is (MEMORY_INDEX_DIR on several machines).
    return vectors_link(index_path())


def read_connection() -> sqlite3.Connection | None:
    """This process's read-only connection to the cache file (None when it has none)."""
    global _reader
    from django.conf import settings

    root, local = settings.MEMORY_ROOT, getattr(settings, "MEMORY_INDEX_DIR", "")
    if _reader is not None and _reader[0] == os.getpid() and _reader[1] == root and _reader[2] == local:
        return _reader[3]
    close_reader()
    path = _cache_path()
    conn: sqlite3.Connection | None = None
    if path.exists():
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
            # Read through a memory map: a rebuild's scanning processes look up every
            # card file's entry, ~9 µs a row through read() calls, ~5 mapped.
            conn.execute(f"PRAGMA mmap_size={READ_MMAP_BYTES}")
            conn.execute("SELECT hash FROM terms LIMIT 1").fetchall()
        except sqlite3.Error:
            # No table yet, or an unreadable file: every lookup is a miss (the rebuild
            # writes the entries; a corrupt file is replaced when the index attaches it).
            conn = None
    _reader = (os.getpid(), root, local, conn)
    return conn


def close_reader() -> None:
    """Forget this process's read connection (after a rebuild replaced entries, tests)."""
    global _reader
    if _reader is not None and _reader[3] is not None and _reader[0] == os.getpid():
        with contextlib.suppress(sqlite3.Error):
            _reader[3].close()
    _reader = None


def _cached(thash: str) -> tuple[str, int] | None:
    conn = read_connection()
    if conn is None:
        return None
    try:
        return conn.execute("SELECT terms, ntok FROM terms WHERE hash = ?", (thash,)).fetchone()
    except sqlite3.Error:
        return None


def compute(text: str) -> Terms:
    """Everything derived from `text`, computed (no cache)."""
    return Terms(terms_hash(text), document_terms(text), fact_tail_tokens(text))


def lookup(text: str) -> Terms:
    """The derived data of `text`: from the cache when it has them, else computed."""
    if _mode == "bypass":
        return compute(text)
    thash = terms_hash(text)
    cached = _cached(thash)
    if _mode == "use":
        if cached is not None:
            return Terms(thash, cached[0], cached[1], fresh=False)
        return Terms(thash, document_terms(text), fact_tail_tokens(text))
    made = compute(text)
    return made._replace(fresh=cached is None, corrupt=cached is not None and tuple(cached) != made[1:3])


# Hashes per `IN (…)` query of `lookup_many`.
_BATCH = 500


def lookup_many(texts: list[str]) -> list[Terms]:
    """`lookup` of many texts, the cache read `_BATCH` hashes a query (a query a text
    cost ~45 µs of a ~70 µs card when a rebuild got cards without their terms)."""
    if _mode == "bypass":
        return [compute(text) for text in texts]
    hashes = [terms_hash(text) for text in texts]
    cached: dict[str, tuple[str, int]] = {}
    conn = read_connection()
    if conn is not None:
        wanted = list(dict.fromkeys(hashes))
        try:
            for start in range(0, len(wanted), _BATCH):
                chunk = wanted[start : start + _BATCH]
                sql = f"SELECT hash, terms, ntok FROM terms WHERE hash IN ({', '.join('?' * len(chunk))})"
                cached.update((h, (t, n)) for h, t, n in conn.execute(sql, chunk))
        except sqlite3.Error:
            cached = {}
    out = []
    for text, thash in zip(texts, hashes, strict=True):
        hit = cached.get(thash)
        if _mode == "use":
            if hit is not None:
                out.append(Terms(thash, hit[0], hit[1], fresh=False))
            else:
                out.append(Terms(thash, document_terms(text), fact_tail_tokens(text)))
            continue
        made = Terms(thash, document_terms(text), fact_tail_tokens(text))
        out.append(made._replace(fresh=hit is None, corrupt=hit is not None and hit != made[1:3]))
    return out


def store(conn: sqlite3.Connection, entries: Iterable[tuple[str, str, int]]) -> None:
    """Inside an index write transaction: remember ``(hash, terms, ntok)`` entries. In
    key order: into a fresh table that is appending pages instead of splitting them at
    random (the hashes are random)."""
    conn.executemany("INSERT OR REPLACE INTO vc.terms (hash, terms, ntok) VALUES (?, ?, ?)", sorted(entries))


def forget_unused(conn: sqlite3.Connection, hashes: Iterable[str | None]) -> None:
    """Inside the index's write transaction: drop the terms no index row names any more
    (erasure must not leave the erased words behind in the cache)."""
    conn.executemany(
        "DELETE FROM vc.terms WHERE hash = ? AND NOT EXISTS (SELECT 1 FROM main.cards WHERE thash = ?)",
        [(h, h) for h in set(hashes) if h],
    )


def prune(conn: sqlite3.Connection) -> int:
    """After a full rebuild: drop every entry no row names."""
    return conn.execute(
        "DELETE FROM vc.terms WHERE NOT EXISTS (SELECT 1 FROM main.cards WHERE thash = vc.terms.hash)"
    ).rowcount
