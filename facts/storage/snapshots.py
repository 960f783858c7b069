"""A snapshot of the files: every card and profile as one scan read them, brought up to
date again under the commit gate, and the drift between the files and a derived copy.

`snapshot` scans the root (`facts.storage.scan`) and keeps each card file that parsed
and sits in the folder its ids say; `refresh` reads again only what changed since
(by ctime, by the file system's own clock), which a rebuild's catch-up does with every
commit held off. The mirror (`facts.mirror`) and the read side's index rebuild from a
snapshot and report their `Drift` against it.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from facts.storage.cardfile import Card, file_digest
from facts.storage.errors import InvalidId
from facts.storage.fileread import read_bounded
from facts.storage.ids import normalize_agent, normalize_id, shard
from facts.storage.scan import Progress, Scanned, ScannedProfile, card_ctimes, scan_cards, scan_one, scan_profiles
from facts.storage.store import Store


@dataclass
class Drift:
    """Differences between the files and a derived copy (the mirror or the index)."""

    missing: list[str] = field(default_factory=list)  # in the files, not in the copy
    extra: list[str] = field(default_factory=list)  # in the copy, no file
    changed: list[str] = field(default_factory=list)  # both, but different
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (path, problem)

    @property
    def clean(self) -> bool:
        return not (self.missing or self.extra or self.changed)

    def as_dict(self) -> dict[str, object]:
        return {
            "missing": self.missing,
            "extra": self.extra,
            "changed": self.changed,
            "unreadable": [{"path": p, "error": e} for p, e in self.unreadable],
        }


@dataclass
class FileSnapshot:
    cards: dict[str, Scanned] = field(default_factory=dict)
    profiles: dict[str, ScannedProfile] = field(default_factory=dict)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    # The file system's clock when the scan began (0: unknown); see `refresh`.
    started_ns: int = 0


# A file whose status changed this long before the scan began was read as it is now.
# The margin covers the kernel's coarse timestamps and small clock adjustments.
_CTIME_MARGIN_NS = 2_000_000_000


def _fs_now_ns(root: Path) -> int:
    """The time as the file system under `root` stamps it (an NFS server's clock may
    differ from ours), read from a file created for the purpose; 0 when it cannot be."""
    try:
        fd, name = tempfile.mkstemp(prefix=".scan-clock-", dir=root)
    except OSError:
        return 0
    try:
        return os.fstat(fd).st_ctime_ns
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name)


@functools.lru_cache(maxsize=4096)
def _bucket_rel(user_id: str | None, agent_name: str | None, project_id: str | None) -> str | None:
    try:
        if user_id is not None:
            return f"users/{normalize_id(user_id, what='user_id')}/agents/{normalize_agent(agent_name)}/facts"
        if project_id:
            return f"projects/{normalize_id(project_id, what='project_id')}/facts"
    except InvalidId:
        return None
    return None


def _rel_for(fact_id: str, user_id: str | None, agent_name: str | None, project_id: str | None) -> str | None:
    """`store.relative(store.card_path(card))` without pathlib (a rebuild checks 100k of
    them); None when the card names no valid bucket."""
    base = _bucket_rel(user_id, agent_name, project_id)
    return None if base is None else f"{base}/{shard(fact_id)}/{fact_id}.md"


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a rebuild makes its ~1M objects.

    Its generational passes walked everything the scan had already built, again and
    again: ~1.5 s of CPU at 100k cards, about a third of a warm scan. What a rebuild
    makes is acyclic (strings, tuples, dicts of them), so reference counting frees it
    all the same; the collector is on again afterwards (unless it was off before).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def snapshot(store: Store, *, progress: Progress | None = None, workers: int | None = None) -> FileSnapshot:
    with gc_paused():
        return _snapshot(store, progress=progress, workers=workers)


def _snapshot(store: Store, *, progress: Progress | None, workers: int | None) -> FileSnapshot:
    snap = FileSnapshot(started_ns=_fs_now_ns(store.root))
    _classify(store, scan_cards(store, progress=progress, workers=workers), snap)
    for item in scan_profiles(store):
        if item.profile is None:
            snap.unreadable.append((item.rel, item.error or "unreadable"))
        else:
            snap.profiles[item.profile.user_id] = item
    return snap


def _classify(store: Store, items: Iterator[Scanned] | list[Scanned], snap: FileSnapshot) -> None:
    for item in items:
        if item.ident is None:
            snap.unreadable.append((item.rel, item.error or "unreadable"))
            continue
        fact_id = item.ident[0]
        if fact_id in snap.cards:
            snap.unreadable.append((item.rel, f"duplicate id {fact_id} (also in {snap.cards[fact_id].rel})"))
        elif _rel_for(*item.ident) != item.rel:
            snap.unreadable.append((item.rel, "card is not in the folder its user/agent/project and id say"))
        else:
            snap.cards[fact_id] = item


def refresh(store: Store, snap: FileSnapshot) -> tuple[list[Card], list[Card]]:
    """Bring `snap` up to date with the files; returns (cards whose file changed or
    appeared since the snapshot, cards whose file is gone).

    Every file is listed again; one is read again only when its status changed since
    shortly before the scan began (its ctime, which no program can set back, by the file
    system's own clock: every write replaces or rewrites the file), and parsed again only
    when its text changed. Reading all 100k files again cost ~8 s with commits held off.
    Meant to run with ``store.commit_gate(exclusive=True)`` held, so that no commit is
    half-way while it reads.
    """
    root = str(store.root)
    known = {item.rel: item for item in snap.cards.values()}
    items: list[Scanned] = []
    settled = snap.started_ns - _CTIME_MARGIN_NS if snap.started_ns else 0
    for rel, ctime in card_ctimes(store):
        old = known.get(rel)
        if old is not None:
            if settled and ctime is not None and ctime < settled:
                items.append(old)
                continue
            try:
                text = read_bounded(store.root / rel).decode("utf-8")
            except (OSError, UnicodeDecodeError):  # gone, refused: scanned again, which says why
                text = None
            if text is not None and file_digest(text) == old.digest:
                items.append(old)
                continue
        items.append(scan_one((root, rel)))
    fresh = FileSnapshot(started_ns=snap.started_ns)
    _classify(store, items, fresh)
    for item in scan_profiles(store):
        if item.profile is None:
            fresh.unreadable.append((item.rel, item.error or "unreadable"))
        else:
            fresh.profiles[item.profile.user_id] = item
    # Cards in `snap.cards` all parsed; `.card` is read only for those that changed (a
    # scanned card is parsed again on first use).
    changed = [
        item.card
        for fact_id, item in fresh.cards.items()
        if (fact_id not in snap.cards or snap.cards[fact_id].digest != item.digest) and item.card is not None
    ]
    gone = [item.card for fact_id, item in snap.cards.items() if fact_id not in fresh.cards and item.card is not None]
    snap.cards, snap.profiles, snap.unreadable = fresh.cards, fresh.profiles, fresh.unreadable
    return changed, gone
