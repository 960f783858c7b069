"""Conflict detection (`facts.curation.conflicts`): live cards of one bucket that claim the same
attribute, under the write side's one key rule (`schemas.normalize_key`)."""

from __future__ import annotations

import pytest

from facts.curation.cards import resolve_conflict
from facts.curation.conflicts import find_conflicts
from facts.enums import CardStatus
from facts.judging.schemas import normalize_key
from facts.models import FactCard
from facts.storage.writer import save_card

pytestmark = pytest.mark.django_db


def test_it_groups_keys_the_gate_would_mint_as_one(make_card) -> None:
    a = save_card(make_card(key="Response Language", content="Answers in English."), actor="t")
    b = save_card(make_card(key="response-language", content="Answers in French.", category="correction"), actor="t")
    [conflict] = find_conflicts()
    assert conflict.key == normalize_key("Response Language") == "response_language"
    assert sorted(card.id for card in conflict.cards) == sorted([a.id, b.id])  # same created_at: ordered by id
    assert conflict.kind == "contradicts a correction"
    assert conflict.scope == "alice × coder"


def test_it_reports_two_live_cards_with_one_key_as_the_same_key(make_card) -> None:
    save_card(make_card(key="editor", content="Uses vim."), actor="t")
    save_card(make_card(key="editor", content="Uses emacs."), actor="t")
    [conflict] = find_conflicts()
    assert (conflict.key, conflict.kind, len(conflict.cards)) == ("editor", "same key", 2)


def test_it_keeps_each_bucket_apart(make_card) -> None:
    save_card(make_card(user_id="alice", key="editor"), actor="t")
    save_card(make_card(user_id="bob", key="editor", category="correction"), actor="t")
    save_card(make_card(user_id="alice", agent_name="writer", key="Editor"), actor="t")
    assert find_conflicts() == []


def test_it_ignores_cards_that_are_no_longer_live(make_card) -> None:
    save_card(make_card(key="editor"), actor="t")
    save_card(make_card(key="editor", status="expired"), actor="t")
    assert find_conflicts() == []


def test_resolving_supersedes_the_others_by_the_kept_card(make_card) -> None:
    keep = save_card(make_card(key="editor", content="Uses vim."), actor="t")
    other = save_card(make_card(key="editor", content="Uses emacs."), actor="t")
    rows = FactCard.objects.in_bulk([keep.id, other.id])
    assert resolve_conflict(rows[keep.id], [rows[other.id]], actor="curator", reason="vim it is") == 1
    row = FactCard.objects.get(id=other.id)
    assert (row.status, row.superseded_by) == (CardStatus.SUPERSEDED, keep.id)
    assert find_conflicts() == []


def test_resolving_refuses_a_card_of_another_bucket(make_card) -> None:
    keep = save_card(make_card(user_id="alice", key="editor"), actor="t")
    other = save_card(make_card(user_id="bob", key="editor"), actor="t")
    rows = FactCard.objects.in_bulk([keep.id, other.id])
    with pytest.raises(ValueError, match="another scope"):
        resolve_conflict(rows[keep.id], [rows[other.id]], actor="curator", reason="")
    assert FactCard.objects.get(id=other.id).status == CardStatus.ACTIVE
