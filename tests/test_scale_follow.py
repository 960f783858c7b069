"""A machine's follower takes in writes other machines made, also those whose change
row committed after a later one was read (issue 24)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from facts.models import CardChange
from facts.writer import save_card
from retrieval import index, reads
from retrieval.follow import Follower

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_indexes(settings: Any, tmp_path: Path, memory_root: Path):  # type: ignore[no-untyped-def]
    settings.MEMORY_CHANGE_LOG = True

    def on(machine: str) -> None:
        settings.MEMORY_INDEX_DIR = str(tmp_path / machine)
        index.reset()

    yield on
    index.reset()


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
    from facts.writer import Delete, commit

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
