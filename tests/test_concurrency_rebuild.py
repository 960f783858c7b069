"""A rebuild that overlaps commits must not undo them in the mirror or the index.

Deterministic version of the race the multi-process test can only hit by chance: the
commits land right after the rebuild has read the files.
"""

from __future__ import annotations

import pytest

from facts import mirror
from facts.models import FactCard
from facts.storage import snapshots
from facts.storage.store import Bucket, Store
from facts.storage.writer import delete_card, save_card, update_card
from memoryadmin import rebuild
from retrieval import indexdrift

pytestmark = pytest.mark.django_db


@pytest.fixture
def writes_during_the_scan(monkeypatch, store: Store, make_card):
    """Make `rebuild`/`check` read the files, then let commits land before they apply."""
    seeded = [save_card(make_card(content=f"Seed fact {i}."), actor="seed") for i in range(3)]
    landed: dict[str, object] = {}
    real = snapshots.snapshot

    def snapshot_then_commits(*args, **kwargs):
        snap = real(*args, **kwargs)
        if not landed:
            landed["updated"] = update_card(
                Bucket.of(seeded[0]), seeded[0].id, lambda c: c.model_copy(update={"content": "Updated meanwhile."}),
                actor="writer",
            )  # fmt: skip
            landed["created"] = save_card(make_card(content="Created meanwhile."), actor="writer")
            delete_card(seeded[1], actor="writer")
            landed["deleted"] = seeded[1]
        return snap

    monkeypatch.setattr(snapshots, "snapshot", snapshot_then_commits)
    return landed


def test_a_rebuild_keeps_commits_that_landed_while_it_ran(writes_during_the_scan, store: Store) -> None:
    result = rebuild.rebuild(actor="reindex")
    landed = writes_during_the_scan
    assert result.extra["caught_up"] == 3
    assert FactCard.objects.get(id=landed["updated"].id).content == "Updated meanwhile."
    assert FactCard.objects.filter(id=landed["created"].id).exists(), "a card created during the rebuild was dropped"
    assert not FactCard.objects.filter(id=landed["deleted"].id).exists()
    fresh = _fresh_snapshot(store)
    assert mirror.mirror_drift(fresh).clean
    assert indexdrift.drift(fresh).clean, "the search index lost a commit made during the rebuild"


def _fresh_snapshot(store: Store) -> snapshots.FileSnapshot:
    snap = snapshots.FileSnapshot()
    snapshots.refresh(store, snap)
    return snap


def test_check_does_not_report_a_commit_during_the_scan_as_drift(writes_during_the_scan) -> None:
    rebuild.rebuild(actor="reindex")  # consumes the injected commits and catches up
    assert rebuild.check().clean


def test_check_still_reports_real_drift(store: Store, make_card) -> None:
    card = save_card(make_card(), actor="seed")
    FactCard.objects.filter(id=card.id).delete()
    report = rebuild.check()
    assert not report.clean
    assert report.parts["mirror"].missing == [card.id]


def test_refresh_reparses_only_what_changed(store: Store, make_card) -> None:
    cards = [save_card(make_card(), actor="seed") for _ in range(3)]
    snap = _fresh_snapshot(store)
    untouched = snap.cards[cards[2].id]
    update_card(Bucket.of(cards[0]), cards[0].id, lambda c: c.model_copy(update={"content": "v2"}), actor="w")
    delete_card(cards[1], actor="w")
    changed, gone = snapshots.refresh(store, snap)
    assert [c.id for c in changed] == [cards[0].id]
    assert [c.id for c in gone] == [cards[1].id]
    assert snap.cards[cards[2].id] is untouched
