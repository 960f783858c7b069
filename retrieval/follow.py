"""Keeping this machine's local search index in step with the other machines' writes.

With several machines on one PostgreSQL and one shared file root, each machine keeps its
own derived index (FTS5 + vectors, in ``MEMORY_INDEX_DIR``) and its own writes reach it
through the write hook as before. The other machines' writes reach it here: every card
write appends its id to `facts.models.CardChange` inside the mirror's transaction, and a
follower (a thread of each machine's ``db_worker``, or ``manage.py follow_index``) polls
that log every ``MEMORY_INDEX_FOLLOW_INTERVAL`` (0.2 s), reads each changed card from the
shared files and hands it to `retrieval.index.update`, which skips rows whose signature
has not changed (this machine's own writes).

Sequence values are handed out before their transactions commit, so a change with a
lower id can become visible after a higher one was read. The follower therefore also
re-reads the log's last ``LOOKBACK_SECONDS`` and applies the ids it has not applied yet;
a transaction open longer than that would be missed until the next rebuild (the writer's
mirror transactions last milliseconds).

A machine that was stopped resumes where it left off: its position is kept beside its
index (``follow.json``), so the writes made while it was down are applied when it comes
back. When the log no longer reaches back that far (rows older than ``KEEP_SECONDS`` are
pruned), or the position was lost, the index is rebuilt from the files instead, and the
erasures since the kept position are scrubbed from it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connections
from django.db.models import Q
from django.utils import timezone

from facts.erasure.scrub import scrub_sqlite, sqlite_files, sweep_generations
from facts.models import CardChange, Erasure, FactCard
from facts.storage.errors import StoreError
from facts.storage.snapshots import snapshot
from facts.storage.store import get_store

from . import index, indexbuild, indexconn, indexpaths

log = logging.getLogger(__name__)

LOOKBACK_SECONDS = 10.0
KEEP_SECONDS = 3600.0
STATE_FILE = "follow.json"


@dataclass
class Follower:
    """Position in the change log, and the ids applied within the look-back window."""

    position: int = 0
    recent: dict[int, float] = field(default_factory=dict)
    last_prune: float = 0.0
    erasures_seen: int = 0
    _saved: tuple[int, int] = (-1, -1)

    @classmethod
    def from_now(cls) -> Follower:
        """Start at the log's end: what came before is in the files, which the index is
        built from when it is missing (call before the index is first opened)."""
        last = CardChange.objects.order_by("-id").values_list("id", flat=True).first()
        erased = Erasure.objects.filter(status=Erasure.Status.DONE).order_by("-id").values_list("id", flat=True).first()
        return cls(position=last or 0, erasures_seen=erased or 0)

    @classmethod
    def resume(cls) -> Follower:
        """Start where this machine's index left off (call before the index is opened).

        - no index yet: from now; it is built from the files when first opened;
        - a kept position the log still reaches: from there, so the writes made while
          this machine was down are applied by the first poll;
        - otherwise (the log was pruned past it, or no position was kept): the index is
          rebuilt from the files, and the erasures since the kept position (all of them
          when none was kept) are scrubbed from its files by the first poll."""
        kept = _load_state()
        if not indexpaths.index_path().exists():
            return cls.from_now()
        oldest = CardChange.objects.order_by("id").values_list("id", flat=True).first()
        if kept is not None:
            # The newest row is never pruned, so an empty log means nothing was written.
            reaches = kept.position >= oldest - 1 if oldest is not None else kept.position == 0
            if reaches:
                return kept
        fresh = cls.from_now()  # taken first: writes during the rebuild are applied after it
        log.warning(
            "follow: the change log no longer reaches this index's position (%s): rebuilding it from the files",
            "none kept" if kept is None else kept.position,
        )
        indexbuild.rebuild_from_snapshot(snapshot(get_store()))
        fresh.erasures_seen = kept.erasures_seen if kept is not None else 0
        return fresh

    def save(self) -> None:
        """Keep the position beside the index (atomically: a crash leaves the old one)."""
        path = _state_path()
        tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}")
        tmp.write_text(json.dumps({"position": self.position, "erasures_seen": self.erasures_seen}))
        os.replace(tmp, path)

    def poll(self) -> int:
        """Apply the changes not applied yet; returns how many cards were looked at."""
        since = timezone.now() - timedelta(seconds=LOOKBACK_SECONDS)
        rows = list(
            CardChange.objects.filter(Q(id__gt=self.position) | Q(created_at__gte=since))
            .order_by("id")
            .values_list("id", "fact_id")
        )
        fresh = [(change_id, fact_id) for change_id, fact_id in rows if change_id not in self.recent]
        if fresh:
            unread = apply_cards(sorted({fact_id for _, fact_id in fresh}))
            now = time.monotonic()
            for change_id, fact_id in fresh:
                # A card not readable yet (an NFS client's attribute cache) is tried again
                # on the next polls while its change is within the look-back window.
                if fact_id not in unread:
                    self.recent[change_id] = now
            self.position = max(self.position, fresh[-1][0])
        horizon = time.monotonic() - 2 * LOOKBACK_SECONDS
        self.recent = {cid: at for cid, at in self.recent.items() if at >= horizon}
        self._scrub_after_erasures()
        self._prune()
        # Taken after the scrub: a poll that only saw an erasure finish must keep that
        # too, or a restart would scrub the index's files again.
        kept = (self.position, self.erasures_seen)
        if fresh or kept != self._saved:
            self.save()
            self._saved = kept
        return len(fresh)

    def _scrub_after_erasures(self) -> None:
        """An erasure finished on another machine: its cards leave this index too, and
        the index's files are scrubbed here as they were there (deleted FTS rows stay in
        old segments and free pages until then)."""
        done = list(
            Erasure.objects.filter(status=Erasure.Status.DONE, id__gt=self.erasures_seen)
            .order_by("id")
            .values_list("id", "fact_ids")
        )
        if not done:
            return
        erased = sorted({fact_id for _, fact_ids in done for fact_id in fact_ids or []})
        if erased:
            apply_cards(erased)
        folder = indexpaths.index_path().parent
        indexconn.reset()  # the scrub's VACUUM wants no connection of ours open
        sweep_generations(folder)
        for path in sqlite_files(folder):
            scrub_sqlite(path)
        self.erasures_seen = done[-1][0]

    def _prune(self) -> None:
        if time.monotonic() - self.last_prune < 60:
            return
        self.last_prune = time.monotonic()
        newest = CardChange.objects.order_by("-id").values_list("id", flat=True).first()
        # The newest row stays: a machine coming back compares its position with the log's
        # oldest row, and an emptied log could not tell it what it missed (`resume`).
        CardChange.objects.filter(created_at__lt=timezone.now() - timedelta(seconds=KEEP_SECONDS)).exclude(
            id=newest  # type: ignore[misc]
        ).delete()


def _state_path() -> Path:
    return indexpaths.index_path().parent / STATE_FILE


def _load_state() -> Follower | None:
    try:
        data = json.loads(_state_path().read_text())
        return Follower(position=int(data["position"]), erasures_seen=int(data["erasures_seen"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # none kept, or unreadable: treated alike (a rebuild)


def apply_cards(fact_ids: list[str]) -> set[str]:
    """Bring the index's rows for `fact_ids` to what the shared files hold now; returns
    the ids whose file could not be read."""
    store = get_store()
    paths = dict(FactCard.objects.filter(id__in=fact_ids).values_list("id", "path"))
    written = []
    gone: list[Any] = []
    unread: set[str] = set()
    for fact_id in fact_ids:
        path = paths.get(fact_id)
        if path is None:
            # Deleted (erasure, expiry for good): the index only needs the id.
            gone.append(SimpleNamespace(id=fact_id))
            continue
        try:
            written.append(store.read_card_at(store.root / path))
        except (OSError, StoreError):
            # Moved again since the mirror row was read, or not visible here yet.
            log.info("follow: card %s not readable at %s yet", fact_id, path)
            unread.add(fact_id)
    index.update(written, gone)
    return unread


class FollowThread(threading.Thread):
    """Polls the change log until stopped; errors are logged and the poll retried."""

    def __init__(self, interval: float | None = None) -> None:
        super().__init__(name="index-follower", daemon=True)
        self.interval = settings.MEMORY_INDEX_FOLLOW_INTERVAL if interval is None else interval
        self.stopped = threading.Event()

    def run(self) -> None:
        follower: Follower | None = None
        try:
            while not self.stopped.is_set():
                try:
                    close_old_connections()
                    if follower is None:
                        follower = Follower.resume()
                        indexconn.connection()  # a missing index is rebuilt from the files
                    follower.poll()
                except Exception:
                    log.warning("following the change log failed; retrying", exc_info=True)
                self.stopped.wait(self.interval)
        finally:
            connections.close_all()


def start() -> FollowThread | None:
    """Start a follower thread when ``MEMORY_INDEX_FOLLOW`` is on."""
    if not settings.MEMORY_INDEX_FOLLOW:
        return None
    thread = FollowThread()
    thread.start()
    return thread
