"""Rebuilding the search index from the files: ``manage.py reindex`` (`rebuild_from_snapshot`,
refilling a usable index in place or publishing a new generation) and the background
rebuild of a missing, corrupt or outdated one (`build_generation`, started by
`retrieval.indexconn`), with the card vectors embedded on every core ahead of it
(`embed_ahead`).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from facts.storage import sqlitegen
from facts.storage.atomic import make_private_dirs
from facts.storage.snapshots import FileSnapshot, gc_paused, refresh, snapshot
from facts.storage.store import Store

from . import derived, embedding, embedmany
from .indexdb import (
    SETTLE_S,
    close_handle,
    connect,
    create_schema,
    discard,
    rebuild_lock,
    try_open,
)
from .indexpaths import index_path, vectors_link
from .indexrows import CONTENT, VHASH, indexed, row_for, scanned_rows
from .indexwrite import Progress, apply, fill


def embed_ahead(snap: FileSnapshot, *, no_cache: bool = False) -> embedmany.Embedding | None:
    """Start embedding the cards of `snap` whose vector the cache lacks (all of them
    with `no_cache`) on every core, while the caller does other work (the mirror);
    `rebuild_from_snapshot(..., ahead=)` waits for it. None when there is little to
    embed: the rebuild does that itself."""
    if not embedding.enabled():
        return None
    texts = {s.row[VHASH]: s.row[CONTENT] for s in scanned_rows(snap)}
    path = index_path()
    make_private_dirs(path.parent)
    return embedmany.embed_in_background(texts, path.parent, no_cache=no_cache)


def rebuild_from_snapshot(
    snap: FileSnapshot,
    *,
    progress: Progress | None = None,
    no_cache: bool = False,
    ahead: embedmany.Embedding | None = None,
    embedding_progress: Progress | None = None,
) -> dict[str, object]:
    """Make the index equal to the files of `snap` (``manage.py reindex``); with
    `no_cache`, every vector is embedded again instead of taken from the cache. The
    vectors the cache lacks are embedded on every core first (`embed_ahead`, or `ahead`
    when the caller started it), with `embedding_progress`.

    A usable index is refilled in place, in one transaction (readers see the old rows
    until it commits); a missing, corrupt or outdated one is replaced by a new
    generation, published when full. The caller catches up with the commits made since
    `snap` was taken (`facts.mirror.catch_up`)."""
    started = time.monotonic()
    if ahead is None:
        ahead = embed_ahead(snap, no_cache=no_cache)
    if ahead is not None:
        ahead.wait(embedding_progress)
        no_cache = False  # every vector was just made: the fill finds them
    path = index_path()
    make_private_dirs(path.parent)
    close_handle()
    derived.close_reader()
    with rebuild_lock(path), gc_paused():
        conn = _open_usable(path)
        fresh: Path | None = None
        if conn is None:
            fresh = sqlitegen.fresh(path)
            conn = connect(fresh, create=True)
            create_schema(conn)
        try:
            count = fill(conn, snap, progress, no_cache=no_cache)
        except BaseException:
            conn.close()
            if fresh is not None:
                discard(fresh)
            raise
        conn.close()
        if fresh is not None:
            sqlitegen.publish(path, fresh)
        _sweep(path)
    return {"indexed": count, "index_seconds": round(time.monotonic() - started, 3)}


def _sweep(path: Path) -> None:
    """Delete the superseded generations of the index and of the vector cache (one
    replaced when found unreadable) that no process opens any more."""
    for link in (path, vectors_link(path)):
        sqlitegen.sweep(link, settled_s=SETTLE_S)


def _open_usable(path: Path) -> sqlite3.Connection | None:
    """A connection to the current generation when it can be refilled in place."""
    opened = try_open(path)
    return None if isinstance(opened, str) else opened[0]


def build_generation(path: Path, store: Store) -> int:
    """A new generation of the index at `path` from the files, published once it holds
    every commit (the background rebuild of a missing, corrupt or outdated index, run
    with ``rebuild.lock`` held). The scan runs in this process (no fork: the caller may
    be a threaded web server). Commits made meanwhile are read again under the commit
    gate, held exclusively, and the link moves under it too: every commit either
    reached the files before that catch-up or writes to the new generation."""
    fresh = sqlitegen.fresh(path)
    conn = connect(fresh, create=True)
    try:
        create_schema(conn)
        snap = snapshot(store, workers=1)
        count = fill(conn, snap)
        # `refresh` updates the snapshot it is given: a copy, the caller's stays as read.
        later = FileSnapshot(dict(snap.cards), dict(snap.profiles), list(snap.unreadable), snap.started_ns)
        with store.commit_gate(exclusive=True):
            changed, gone = refresh(store, later)
            puts = [row_for(card) for card in changed if indexed(card)]
            removals = [card.id for card in changed if not indexed(card)] + [card.id for card in gone]
            if puts or removals:
                apply(conn, puts, removals)
            sqlitegen.publish(path, fresh)
    except BaseException:
        conn.close()
        discard(fresh)
        raise
    conn.close()
    _sweep(path)
    return count
