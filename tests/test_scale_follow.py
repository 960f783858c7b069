"""A machine's follower takes in writes other machines made, also those whose change
row committed after a later one was read (issue 24)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from facts.models import CardChange
from facts.storage.writer import save_card
from retrieval import indexconn, indexpaths, reads
from retrieval.follow import Follower

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_indexes(settings: Any, tmp_path: Path, memory_root: Path):
    settings.MEMORY_CHANGE_LOG = True

    def on(machine: str) -> None:
        settings.MEMORY_INDEX_DIR = str(tmp_path / machine)
        indexconn.reset()
        indexconn.connection()  # as the worker's follower opens it before its first poll

    yield on
    indexconn.reset()


def test_it_finds_a_card_written_on_the_other_machine_after_one_poll(two_indexes, make_card) -> None:
    two_indexes("b")
    follower = Follower.from_now()
    assert reads.count() == 0
    two_indexes("a")
    card = save_card(make_card(content="Alice stores her kayak in the north shed."), actor="t")
    two_indexes("b")
    assert reads.count() == 0
    assert follower.poll() == 1
    assert reads.contents([card.id])
    assert follower.poll() == 0  # nothing applied twice


def test_a_change_that_commits_late_is_still_applied(two_indexes, make_card) -> None:
    two_indexes("b")
    follower = Follower.from_now()
    two_indexes("a")
    card = save_card(make_card(content="Alice stores her kayak in the north shed."), actor="t")
    (late,) = CardChange.objects.filter(fact_id=card.id)
    two_indexes("b")
    # The follower already read past this id (a later transaction committed first).
    follower.position = late.id + 10
    follower.poll()
    assert reads.contents([card.id])


def test_a_card_deleted_on_the_other_machine_leaves_this_index(two_indexes, make_card) -> None:
    from facts.storage.writer import Delete, commit

    two_indexes("b")
    follower = Follower.from_now()
    two_indexes("a")
    card = save_card(make_card(content="Alice stores her kayak in the north shed."), actor="t")
    two_indexes("b")
    follower.poll()
    two_indexes("a")
    commit([Delete(card)], actor="t", reason="gone")
    two_indexes("b")
    follower.poll()
    assert reads.contents([card.id]) == {}


def _restart(two_indexes: Any) -> Follower:
    """Machine B's worker starting again: its follower resumes, then opens the index."""
    two_indexes("b")
    follower = Follower.resume()
    indexconn.connection()
    return follower


def test_a_machine_that_was_down_applies_the_writes_made_meanwhile(two_indexes, make_card) -> None:
    first = _restart(two_indexes)
    first.poll()  # keeps its position beside the index
    two_indexes("a")  # B is down; A writes
    card = save_card(make_card(content="Alice stores her kayak in the north shed."), actor="t")
    # Down for five minutes: well past the follower's look-back window.
    CardChange.objects.update(created_at=timezone.now() - timedelta(minutes=5))

    follower = _restart(two_indexes)
    follower.poll()

    assert reads.contents([card.id])


def test_a_log_pruned_past_the_kept_position_rebuilds_the_index_from_the_files(two_indexes, make_card) -> None:
    first = _restart(two_indexes)
    first.poll()
    two_indexes("a")
    missed = save_card(make_card(content="Alice stores her kayak in the north shed."), actor="t")
    later = save_card(make_card(key="bike", content="Alice rides a blue bike to work."), actor="t")
    CardChange.objects.exclude(fact_id=later.id).delete()  # pruned while B was down

    _restart(two_indexes)

    assert reads.contents([missed.id]) and reads.contents([later.id])


def test_a_lost_position_rebuilds_an_existing_index(two_indexes, make_card) -> None:
    first = _restart(two_indexes)
    first.poll()
    (indexpaths.index_path().parent / "follow.json").unlink()
    two_indexes("a")
    card = save_card(make_card(content="Alice stores her kayak in the north shed."), actor="t")
    CardChange.objects.all().delete()

    _restart(two_indexes)

    assert reads.contents([card.id])


def test_pruning_keeps_the_newest_change(two_indexes, make_card, monkeypatch) -> None:
    from retrieval import follow

    two_indexes("a")
    cards = [save_card(make_card(key=f"k{n}", content=f"Alice owns kayak number {n}."), actor="t") for n in range(3)]
    monkeypatch.setattr(follow, "KEEP_SECONDS", -60.0)  # everything is old

    Follower(last_prune=0.0)._prune()

    assert list(CardChange.objects.values_list("fact_id", flat=True)) == [cards[-1].id]
