"""Curation verbs in the write side (`facts.curation`): each writes through the writer
and audits itself, whichever door calls it, and reviewability is checked there too."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from facts.curation import cards, profiles, review
from facts.models import AuditEvent, Candidate, FactCard
from facts.storage.cardfile import Card, now_utc
from facts.storage.store import Store
from facts.storage.writer import save_card
from memoryadmin import api_service

pytestmark = pytest.mark.django_db


def test_it_refuses_to_approve_a_candidate_the_gate_already_wrote(make_candidate: Callable[..., Any]) -> None:
    accepted = make_candidate(verdict=Candidate.Verdict.ACCEPTED, review_state=Candidate.ReviewState.NONE, reasons=[])
    with pytest.raises(review.NotReviewable, match="wrote it already"):
        review.apply_candidate(accepted, actor="rita", note="again")
    assert not FactCard.objects.exists()
    assert not AuditEvent.objects.exists()


def test_it_refuses_to_dismiss_a_candidate_a_reviewer_decided(make_candidate: Callable[..., Any]) -> None:
    approved = make_candidate(review_state=Candidate.ReviewState.APPROVED)
    with pytest.raises(review.NotReviewable, match="already approved"):
        review.dismiss_candidate(approved, actor="rita", note="")
    approved.refresh_from_db()
    assert approved.review_state == Candidate.ReviewState.APPROVED


def test_the_reviewable_query_and_the_rule_for_one_candidate_agree(make_candidate: Callable[..., Any]) -> None:
    states = [
        (Candidate.Verdict.REJECTED, Candidate.ReviewState.NONE),
        (Candidate.Verdict.ACCEPTED, Candidate.ReviewState.NONE),
        (Candidate.Verdict.ACCEPTED, Candidate.ReviewState.PENDING),
        (Candidate.Verdict.REJECTED, Candidate.ReviewState.DISMISSED),
        (Candidate.Verdict.REJECTED, Candidate.ReviewState.APPROVED),
    ]
    rows = [make_candidate(verdict=v, review_state=s) for v, s in states]
    by_query = set(Candidate.objects.filter(review.REVIEWABLE).values_list("pk", flat=True))
    assert by_query == {row.pk for row in rows if review.is_reviewable(row)} == {rows[0].pk, rows[2].pk}


def _row(card: Card) -> FactCard:
    return FactCard.objects.get(id=card.id)


def test_expiring_from_the_api_and_from_the_dashboard_write_and_audit_alike(
    make_card: Callable[..., Card], store: Store
) -> None:
    by_api = save_card(make_card(), actor="t")
    by_page = save_card(make_card(), actor="t")
    api_service.expire_fact(api_service.Scope("alice", "coder"), by_api.id, actor="agent:coder", reason="stale")
    cards.expire(_row(by_page), actor="rita", reason="stale")
    audits = {e.target: e for e in AuditEvent.objects.filter(action=AuditEvent.Action.EXPIRE)}
    for card, actor in ((by_api, "agent:coder"), (by_page, "rita")):
        assert _row(card).status == "expired"
        assert (audits[card.id].actor, audits[card.id].details) == (actor, {"revision": 2, "at": "now"})


def test_a_later_expiry_keeps_the_card_active_until_then(make_card: Callable[..., Card]) -> None:
    card = save_card(make_card(), actor="t")
    later = now_utc() + timedelta(days=3)
    expired = cards.expire(_row(card), actor="rita", reason="", at=later)
    assert expired.when == later.isoformat()
    assert (expired.card.status, expired.card.expires_at) == ("active", later)


def test_an_agent_identity_longer_than_the_audit_column_is_cut_to_fit(make_card: Callable[..., Card]) -> None:
    card = save_card(make_card(), actor="t")
    cards.restore(_row(card), actor="a" * 400, reason="")
    assert AuditEvent.objects.get(action=AuditEvent.Action.RESTORE).actor == "a" * 150


def test_deleting_for_good_removes_the_card_and_audits_where_not_what(make_card: Callable[..., Card]) -> None:
    card = save_card(make_card(content="Secret words."), actor="t")
    assert cards.delete_for_good([_row(card)], actor="ada", reason="asked") == 1
    assert not FactCard.objects.filter(id=card.id).exists()
    event = AuditEvent.objects.get(action=AuditEvent.Action.DELETE)
    assert event.target == card.id and "Secret" not in str(event.details)


def test_a_profile_edit_audits_each_changed_section_and_an_unchanged_one_writes_nothing() -> None:
    first = profiles.edit_profile(
        "alice", {"workContext": "Builds compilers.", "topOfMind": ""}, actor="rita", reason="", expected_revision=0
    )
    assert first.sections == ["workContext"] and first.profile.revision == 1
    again = profiles.edit_profile(
        "alice", {"workContext": "Builds compilers. "}, actor="rita", reason="", expected_revision=1
    )
    assert again.sections == [] and again.profile.revision == 1
    assert list(AuditEvent.objects.values_list("action", "target")) == [("profile_edit", "workContext")]


def test_a_profile_revert_to_an_unknown_version_is_refused() -> None:
    with pytest.raises(cards.UnknownRevision):
        profiles.revert_profile("alice", 7, actor="rita", reason="", expected_revision=0)
