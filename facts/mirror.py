"""The DB mirror of the files: rebuilding it from a snapshot of them (hand edits get a
revision), finding drift between the two, and catching up with the commits made while a
rebuild ran. The snapshot itself, and the scan that reads it: `facts.storage.snapshots`,
`facts.storage.scan`."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from django.db import transaction

from facts.models import FactCard, FactRevision, ProfileSection
from facts.storage import hooks
from facts.storage.cardfile import Card, dump_card, file_digest
from facts.storage.errors import RevisionConflict
from facts.storage.scan import Scanned
from facts.storage.snapshots import Drift, FileSnapshot, refresh
from facts.storage.store import Store
from facts.storage.writer import Put, commit, mirror_profile, mirror_row, upsert_mirror


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
    for user_id, scanned in snap.profiles.items():
        if user_id not in profiles:
            drift.missing.append(f"profile:{user_id}")
        elif profiles[user_id] != scanned.digest:
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


def rebuild_mirror(snap: FileSnapshot, *, actor: str = "reindex", full: bool = False) -> RebuildStats:
    """Make the mirror equal to the files. Hand edits get a revision in the history.

    A row whose recorded file hash equals the file's is left alone: every column is
    derived from that text (and its path, which the text determines), and rewriting
    100k unchanged rows was ~40 % of a `reindex`. `full` rewrites every row anyway
    (``reindex --no-cache``: the mirror was touched by something other than the writer).
    """
    stats = RebuildStats(unreadable=list(snap.unreadable))
    mirrored = dict(FactCard.objects.values_list("id", "file_sha256"))
    revisions = []
    for fact_id, item in snap.cards.items():
        if mirrored.get(fact_id) != item.digest:
            stats.changed += 1
            revisions.append((item, item.rel))
    items = list(snap.cards.values()) if full else [item for item, _ in revisions]
    with transaction.atomic():
        # A chunk of model instances at a time: 100k at once cost ~100 MB of peak RSS.
        for start in range(0, len(items), 2000):
            upsert_mirror([mirror_row(i.card, i.rel, i.digest) for i in items[start : start + 2000] if i.card])
        gone = set(mirrored) - set(snap.cards)
        if gone:
            FactCard.objects.filter(id__in=gone).delete()
        stats.removed = len(gone)
        ProfileSection.objects.exclude(user_id__in=list(snap.profiles)).delete()
        for scanned in snap.profiles.values():
            assert scanned.profile is not None
            mirror_profile(scanned.profile, scanned.rel, scanned.digest)
    _record_hand_edits(revisions, actor)
    stats.cards = len(snap.cards)
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
    ids = [item.fact_id for item, _ in changed if item.fact_id is not None]
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
    for card in edited:
        # Written again since the scan? That commit read the hand edit and has its revision.
        with contextlib.suppress(RevisionConflict):
            commit([Put(card, expected_revision=card.revision)], actor=actor, reason="edited on disk")


# --- catching up with the writes made during a rebuild ----------------------------------


def catch_up(store: Store, snap: FileSnapshot) -> int:
    """The last step of a rebuild: apply what was committed while it ran.

    A rebuild reads the files, then replaces mirror and index from what it read; a
    commit that lands in between would be undone (an older version put back, a new
    card dropped) until the next rebuild. With every commit shut out for a moment, the
    files are read again and whatever changed since the snapshot goes to the mirror
    and, through the write hook, to the index. Returns how many cards it applied.
    """
    with store.commit_gate(exclusive=True):
        changed, gone = refresh(store, snap)
        mirrored_profiles = dict(ProfileSection.objects.values_list("user_id", "file_sha256").distinct())
        stale_profiles = [
            item for user_id, item in snap.profiles.items() if mirrored_profiles.get(user_id) != item.digest
        ]
        vanished_profiles = set(mirrored_profiles) - set(snap.profiles)
        if changed or gone or stale_profiles or vanished_profiles:
            with transaction.atomic():
                upsert_mirror(
                    [mirror_row(card, snap.cards[card.id].rel, snap.cards[card.id].digest) for card in changed]
                )
                if gone:
                    FactCard.objects.filter(id__in=[card.id for card in gone]).delete()
                for item in stale_profiles:
                    assert item.profile is not None
                    mirror_profile(item.profile, item.rel, item.digest)
                if vanished_profiles:
                    ProfileSection.objects.filter(user_id__in=vanished_profiles).delete()
        if changed or gone:
            hooks.cards_changed(changed, gone)
    return len(changed) + len(gone)
