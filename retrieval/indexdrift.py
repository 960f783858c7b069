"""What ``reindex --check`` compares: the search index, its vectors and the cache of
derived data against the files. Reads only: a check never builds a missing index.
"""

from __future__ import annotations

import sqlite3

from facts.storage import sqlitegen
from facts.storage.snapshots import Drift, FileSnapshot

from . import embedding, scancache, vectorcache
from .indexdb import SCHEMA_VERSION, cannot_open, connect, is_corruption
from .indexpaths import index_path
from .indexrows import SIG, VHASH, ScanRow, scanned_row


def _open_current() -> sqlite3.Connection | None:
    """A connection to the current generation for a check (None when there is none): a
    check never builds a missing index."""
    current = sqlitegen.target(index_path())
    if current is None:
        return None
    try:
        return connect(current)
    except sqlite3.DatabaseError as exc:
        if is_corruption(exc) or cannot_open(exc):
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
        elif sig != scanned.row[SIG]:
            result.changed.append(fact_id)
    result.extra.extend(sorted(set(actual) - set(expected)))
    result.missing.sort()
    result.changed.sort()
    return result


def vector_drift(snap: FileSnapshot) -> Drift | None:
    """Files vs vectors (None when embeddings are off): a card with no vector, or none
    in the cache, is missing; one whose vector was made from other text is changed."""
    if not embedding.enabled():
        return None
    result = Drift()
    # A row's vhash is its text's content hash whenever embeddings are on (`row_for`).
    expected = {fid: scanned.row[VHASH] for fid, scanned in _live_rows(snap).items()}
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
            if embedding.enabled():
                wanted: dict[str, list[str]] = {}
                for fact_id, scanned in live.items():
                    wanted.setdefault(scanned.row[VHASH], []).append(fact_id)
                bad = set(vectorcache.malformed(conn, wanted))
                result.changed.extend(fid for h in bad for fid in wanted[h])
        finally:
            conn.close()
    result.changed = sorted(set(result.changed))
    return result
