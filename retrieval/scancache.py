"""The scan cache: what a card file's text gave last time, by the file's digest.

``vc.scans`` (in the derived-data cache file, `retrieval.derived`) maps a card file's
SHA-256 to the card's (id, user, agent, project) and its index row: a rebuild reads and
hashes every file but parses and tokenizes only those it has not seen
(`facts.storage.scan.set_scan_cache`, registered with `lookup`). The key also names the index
schema, the tokenizer and the model (or "no vectors"), so any of those changing makes
every entry a miss. A card's entries go when it is written again or removed
(`retrieval.indexwrite.apply` → `forget`), and entries no file has any more after a full
rebuild (`retrieval.indexwrite.fill` → `store`); ``reindex --check`` compares each entry
with a fresh parse (`drift`).
"""

from __future__ import annotations

import marshal
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from facts.storage.scan import Scanned
from facts.storage.snapshots import FileSnapshot

from . import derived, embedding, indexrows
from .indexdb import SCHEMA_VERSION

# Row fields 1-6 (scope, bucket, user, agent, project, category) repeat within a bucket.
_SHARED_END = 7
# Keys per `IN (…)` query.
_BATCH = 500


def _version() -> str:
    model = embedding.MODEL_ID if embedding.enabled() else "no-vectors"
    return f"{SCHEMA_VERSION}/{derived.TOKENIZER_ID}/{model}"


def _keys(digests: Iterable[str]) -> dict[str, str]:
    """key → digest: the cache's keys of these file digests."""
    version = _version()
    return {f"{version}:{digest}": digest for digest in digests}


def _by_key(snap: FileSnapshot) -> dict[str, Scanned]:
    """The snapshot's cards by their scan-cache key."""
    items = [item for item in snap.cards.values() if item.ident is not None]
    return dict(zip(_keys(item.digest for item in items), items, strict=True))


def _value(item: Scanned) -> tuple:
    """What the cache keeps of a parsed card file: (ident, index row or None)."""
    scanned = indexrows.scanned_row(item)
    return (item.ident, None if scanned is None else scanned.row)


def _entries(conn: sqlite3.Connection, table: str, keys: Sequence[str]) -> Iterator[tuple[str, bytes]]:
    """(key, entry) of the `keys` `table` holds, `_BATCH` keys a query."""
    for start in range(0, len(keys), _BATCH):
        chunk = keys[start : start + _BATCH]
        yield from conn.execute(f"SELECT key, entry FROM {table} WHERE key IN ({', '.join('?' * len(chunk))})", chunk)


def lookup(digests: list[str]) -> dict[str, tuple[tuple, dict[str, object]]]:
    """Run in the scanning processes: digest → (ident, extra) of the files seen before.
    Nothing when the cache is bypassed (--no-cache) or verified (--check)."""
    if derived.tokenizes_everything() or not digests:
        return {}
    conn = derived.read_connection()
    if conn is None:
        return {}
    keys = _keys(digests)
    found: dict[str, tuple[tuple, dict[str, object]]] = {}
    same: Callable[[Any, Any], Any] = {}.setdefault
    try:
        for key, entry in _entries(conn, "scans", list(keys)):
            ident, row = marshal.loads(entry)
            # One object for the strings a bucket's cards repeat (user, agent, bucket,
            # scope, category): the chunk pickled for the parent then holds each once.
            ident = (ident[0], *[same(v, v) for v in ident[1:]])
            scanned = None
            if row is not None:
                row = (row[0], *[same(v, v) for v in row[1:_SHARED_END]], *row[_SHARED_END:])
                terms = derived.Terms(row[indexrows.THASH], row[indexrows.TERMS], row[indexrows.NTOK], False)
                scanned = indexrows.ScanRow(terms, row)
            found[keys[key]] = (ident, {indexrows.SCAN_EXTRA: scanned})
    except (sqlite3.Error, ValueError, EOFError, TypeError, IndexError):
        return {}  # an older or damaged cache file: everything is parsed, and rewritten
    return found


def store(conn: sqlite3.Connection, snap: FileSnapshot) -> None:
    """Inside a full rebuild's transaction: remember what was parsed, forget what no
    file has."""
    items = _by_key(snap)
    # In key order: a fresh table then appends pages instead of splitting them at random.
    fresh = sorted((key, item.fact_id, marshal.dumps(_value(item))) for key, item in items.items() if not item.cached)
    conn.executemany("INSERT OR REPLACE INTO vc.scans (key, fact_id, entry) VALUES (?, ?, ?)", fresh)
    keys = items.keys()
    if fresh or conn.execute("SELECT count(*) FROM vc.scans").fetchone()[0] != len(keys):
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS live_scans (key TEXT PRIMARY KEY) WITHOUT ROWID")
        conn.execute("DELETE FROM temp.live_scans")
        conn.executemany("INSERT INTO temp.live_scans (key) VALUES (?)", ((k,) for k in keys))
        conn.execute("DELETE FROM vc.scans WHERE key NOT IN (SELECT key FROM temp.live_scans)")
        conn.execute("DELETE FROM temp.live_scans")


def forget(conn: sqlite3.Connection, fact_ids: Sequence[str]) -> None:
    """Inside a write's transaction: what the cache knew of these cards' old files goes
    (an erased card's text must not stay behind in it)."""
    conn.executemany("DELETE FROM vc.scans WHERE fact_id = ?", [(fact_id,) for fact_id in fact_ids])


def drift(conn: sqlite3.Connection, snap: FileSnapshot) -> list[str]:
    """Ids whose scan-cache entry differs from what parsing their file gives now."""
    items = _by_key(snap)
    bad: list[str] = []
    for key, entry in _entries(conn, "vc.scans", list(items)):
        item = items[key]
        try:
            same = marshal.loads(entry) == _value(item)
        except (ValueError, EOFError, TypeError):
            same = False
        if not same:
            bad.append(item.fact_id)  # type: ignore[arg-type]
    return bad
