"""Rebuilding the DB mirror from the files, and finding drift between the two."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from django.db import transaction

from .models import FactCard, FactRevision, ProfileSection
from .store import Card, CardParseError, Profile, Store, dump_card, file_digest, parse_card, parse_profile
from .writer import mirror_profile, mirror_row, upsert_mirror

Progress = Callable[[int, int], None]


@dataclass
class Scanned:
    rel: str
    digest: str = ""
    card: Card | None = None
    error: str | None = None


@dataclass
class ScannedProfile:
    rel: str
    digest: str = ""
    profile: Profile | None = None
    error: str | None = None


def _scan_one(args: tuple[str, str]) -> Scanned:
    root, rel = args
    path = Path(root) / rel
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except FileNotFoundError:
        return Scanned(rel, error="file disappeared during the scan")
    except UnicodeDecodeError:
        return Scanned(rel, error="file is not valid UTF-8")
    digest = file_digest(text)
    try:
        card = parse_card(text, path)
    except CardParseError as exc:
        return Scanned(rel, digest, error=exc.message)
    return Scanned(rel, digest, card)


def _scan_chunk(args: tuple[str, list[str]]) -> list[Scanned]:
    root, rels = args
    return [_scan_one((root, rel)) for rel in rels]


def scan_cards(store: Store, *, workers: int | None = None, progress: Progress | None = None) -> Iterator[Scanned]:
    """Read and parse every card file, on several processes when there are many."""
    rels = [store.relative(path) for path in store.card_files()]
    total = len(rels)
    workers = workers or min(os.cpu_count() or 1, 4)
    done = 0
    if workers < 2 or total < 2000:
        for rel in rels:
            yield _scan_one((str(store.root), rel))
            done += 1
            if progress and (done % 500 == 0 or done == total):
                progress(done, total)
        if progress and total == 0:
            progress(0, 0)
        return
    size = 500
    chunks = [(str(store.root), rels[i : i + size]) for i in range(0, total, size)]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        for batch in pool.imap(_scan_chunk, chunks):
            yield from batch
            done += len(batch)
            if progress:
                progress(done, total)


def scan_profiles(store: Store) -> Iterator[ScannedProfile]:
    for path in store.profile_files():
        rel = store.relative(path)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            yield ScannedProfile(rel, error="file is not valid UTF-8")
            continue
        digest = file_digest(text)
        try:
            yield ScannedProfile(rel, digest, parse_profile(text, path))
        except CardParseError as exc:
            yield ScannedProfile(rel, digest, error=exc.message)


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


def snapshot(store: Store, *, progress: Progress | None = None, workers: int | None = None) -> FileSnapshot:
    snap = FileSnapshot()
    for item in scan_cards(store, progress=progress, workers=workers):
        if item.card is None:
            snap.unreadable.append((item.rel, item.error or "unreadable"))
        elif item.card.id in snap.cards:
            snap.unreadable.append((item.rel, f"duplicate id {item.card.id} (also in {snap.cards[item.card.id].rel})"))
        elif store.relative(store.card_path(item.card)) != item.rel:
            snap.unreadable.append((item.rel, "card is not in the folder its user/agent/project and id say"))
        else:
            snap.cards[item.card.id] = item
    for item in scan_profiles(store):
        if item.profile is None:
            snap.unreadable.append((item.rel, item.error or "unreadable"))
        else:
            snap.profiles[item.profile.user_id] = item
    return snap


def mirror_drift(snap: FileSnapshot) -> Drift:
    drift = Drift(unreadable=list(snap.unreadable))
    mirrored = dict(FactCard.objects.values_list("id", "file_sha256"))
    for fact_id, item in snap.cards.items():
        if fact_id not in mirrored:
            drift.missing.append(fact_id)
        elif mirrored[fact_id] != item.digest:
            drift.changed.append(fact_id)
    drift.extra.extend(sorted(set(mirrored) - set(snap.cards)))
    profiles = dict(ProfileSection.objects.values_list("user_id", "file_sha256").distinct())
    for user_id, item in snap.profiles.items():
        if user_id not in profiles:
            drift.missing.append(f"profile:{user_id}")
        elif profiles[user_id] != item.digest:
            drift.changed.append(f"profile:{user_id}")
    drift.extra.extend(f"profile:{u}" for u in sorted(set(profiles) - set(snap.profiles)))
    drift.missing.sort()
    drift.changed.sort()
    return drift


@dataclass
class RebuildStats:
    cards: int = 0
    profiles: int = 0
    changed: int = 0
    removed: int = 0
    unreadable: list[tuple[str, str]] = field(default_factory=list)


def rebuild_mirror(snap: FileSnapshot, *, actor: str = "reindex") -> RebuildStats:
    """Make the mirror equal to the files. Hand edits get a revision in the history."""
    stats = RebuildStats(unreadable=list(snap.unreadable))
    mirrored = dict(FactCard.objects.values_list("id", "file_sha256"))
    rows = []
    revisions = []
    for fact_id, item in snap.cards.items():
        assert item.card is not None
        rows.append(mirror_row(item.card, item.rel, item.digest))
        if mirrored.get(fact_id) != item.digest:
            stats.changed += 1
            revisions.append((item, item.rel))
    with transaction.atomic():
        upsert_mirror(rows)
        gone = set(mirrored) - set(snap.cards)
        if gone:
            FactCard.objects.filter(id__in=gone).delete()
        stats.removed = len(gone)
        ProfileSection.objects.exclude(user_id__in=list(snap.profiles)).delete()
        for item in snap.profiles.values():
            assert item.profile is not None
            mirror_profile(item.profile, item.rel, item.digest)
    _record_hand_edits(revisions, actor)
    stats.cards = len(rows)
    stats.profiles = len(snap.profiles)
    return stats


def _record_hand_edits(changed: list[tuple[Scanned, str]], actor: str) -> None:
    """Give every card that changed on disk a place in its history.

    A card the history has never seen (placed by hand, restored from a backup) gets its
    revision recorded as it is. A card whose file no longer matches the recorded text of
    its revision was edited by hand: it is committed again through the write function so
    it gets a new revision — otherwise a dashboard edit holding the old revision number
    would pass the revision check and silently overwrite the hand edit.
    """
    if not changed:
        return
    from .writer import Put, commit

    ids = [item.card.id for item, _ in changed if item.card is not None]
    recorded = {
        (fact_id, revision): file_digest(text)
        for fact_id, revision, text in FactRevision.objects.filter(fact_id__in=ids).values_list(
            "fact_id", "revision", "text"
        )
    }
    new: list[FactRevision] = []
    edited: list[Card] = []
    for item, _ in changed:
        card = item.card
        assert card is not None
        digest = recorded.get((card.id, card.revision))
        if digest is None:
            new.append(
                FactRevision(
                    fact_id=card.id, revision=card.revision, text=dump_card(card), actor=actor, reason="found on disk"
                )
            )
        elif digest != item.digest and digest != file_digest(dump_card(card)):
            edited.append(card)
    FactRevision.objects.bulk_create(new, ignore_conflicts=True, batch_size=500)
    if edited:
        commit([Put(card, expected_revision=card.revision) for card in edited], actor=actor, reason="edited on disk")
