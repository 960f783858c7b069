"""Dashboard: the review queue, a candidate in its conversation, approve / correct / dismiss, bulk."""

from __future__ import annotations

import pytest
from django.test import Client

from facts.models import AuditEvent, Candidate, FactCard
from facts.storage.writer import save_card

pytestmark = pytest.mark.django_db


def test_the_queue_shows_what_waits_with_verdict_and_reasons(viewer_client: Client, make_candidate) -> None:
    make_candidate(content="Waiting one.", reasons=["low_confidence", "temporary"])
    make_candidate(content="Already dismissed.", review_state=Candidate.ReviewState.DISMISSED)
    make_candidate(
        content="Live already.", verdict=Candidate.Verdict.ACCEPTED, reasons=[], review_state=Candidate.ReviewState.NONE
    )
    body = viewer_client.get("/review/").content.decode()
    assert "Waiting one." in body and "low_confidence" in body and "temporary" in body
    assert "Already dismissed." not in body and "Live already." not in body


def test_accepted_candidates_held_in_manual_mode_wait_in_the_queue(viewer_client: Client, make_candidate) -> None:
    make_candidate(content="Held for approval.", verdict=Candidate.Verdict.ACCEPTED, reasons=[])
    body = viewer_client.get("/review/", {"verdict": "accepted"}).content.decode()
    assert "Held for approval." in body


def test_the_queue_filters_by_reason_code_user_and_state(viewer_client: Client, make_candidate) -> None:
    make_candidate(content="Thread scoped.", reasons=["scope_thread"])
    make_candidate(content="Low confidence.", reasons=["low_confidence"])
    make_candidate(content="Bob's.", user_id="bob", reasons=["scope_thread"])
    rows = viewer_client.get("/review/", {"reason": "scope_thread", "user": "alice"}).context["page"].object_list
    assert [c.content for c in rows] == ["Thread scoped."]
    everything = viewer_client.get("/review/", {"state": "all"}).context["page"].paginator.count
    assert everything == 3


def test_a_candidate_is_shown_in_its_conversation_with_the_evidence_marked_and_escaped(
    viewer_client: Client, make_candidate
) -> None:
    rows = [
        {"id": "m1", "role": "user", "content": "Note: <script>x()</script> I want answers in English."},
        {"id": "m2", "role": "assistant", "content": "Sure </memory> ok."},
    ]
    candidate = make_candidate(rows=rows)
    body = viewer_client.get(f"/review/{candidate.pk}/").content.decode()
    assert "<mark>answers in English</mark>" in body
    assert "<script>x()</script>" not in body and "&lt;script&gt;" in body
    assert "</memory>" not in body


def test_the_existing_card_of_the_same_key_is_shown_side_by_side(
    viewer_client: Client, make_candidate, make_card
) -> None:
    save_card(make_card(key="response_language", content="Prefers answers in German."), actor="t")
    candidate = make_candidate()
    response = viewer_client.get(f"/review/{candidate.pk}/")
    assert response.context["existing"].content == "Prefers answers in German."
    assert b"approval replaces it" in response.content


def test_approving_overrides_the_gate_and_keeps_the_reason(reviewer_client: Client, make_candidate) -> None:
    candidate = make_candidate()
    response = reviewer_client.post(f"/review/{candidate.pk}/approve/", {"note": "she said it twice"})
    assert response.status_code == 302
    candidate.refresh_from_db()
    assert candidate.review_state == Candidate.ReviewState.APPROVED
    assert candidate.review_note == "she said it twice"
    assert candidate.reviewed_by.username == "reviewer"
    card = FactCard.objects.get(id=candidate.fact_id)
    assert (card.content, card.user_id, card.agent_name) == ("Prefers answers in English.", "alice", "coder")
    assert AuditEvent.objects.filter(action="approve", reason="she said it twice").exists()


def test_approving_without_a_reason_does_nothing(reviewer_client: Client, make_candidate) -> None:
    candidate = make_candidate()
    reviewer_client.post(f"/review/{candidate.pk}/approve/", {"note": ""})
    candidate.refresh_from_db()
    assert candidate.review_state == Candidate.ReviewState.PENDING
    assert not FactCard.objects.exists()


def test_a_viewer_cannot_approve_or_dismiss(viewer_client: Client, make_candidate) -> None:
    candidate = make_candidate()
    assert viewer_client.post(f"/review/{candidate.pk}/approve/", {"note": "x"}).status_code == 403
    assert viewer_client.post(f"/review/{candidate.pk}/dismiss/", {}).status_code == 403
    assert viewer_client.get("/review/bulk/", {"action": "dismiss"}).status_code == 403
    candidate.refresh_from_db()
    assert candidate.review_state == Candidate.ReviewState.PENDING


def test_correct_and_approve_writes_the_edited_fields(reviewer_client: Client, make_candidate) -> None:
    candidate = make_candidate()
    reviewer_client.post(
        f"/review/{candidate.pk}/approve/",
        {
            "note": "fixing wording",
            "content": "Wants English replies.",
            "key": "reply_language",
            "category": "preference",
            "confidence": "0.9",
        },
    )
    candidate.refresh_from_db()
    card = FactCard.objects.get(id=candidate.fact_id)
    assert (card.content, card.key, card.confidence) == ("Wants English replies.", "reply_language", 0.9)
    assert AuditEvent.objects.filter(action="correct", target=f"candidate:{candidate.pk}").exists()


def test_dismissing(reviewer_client: Client, make_candidate) -> None:
    candidate = make_candidate()
    reviewer_client.post(f"/review/{candidate.pk}/dismiss/", {"note": "noise"})
    candidate.refresh_from_db()
    assert (candidate.review_state, candidate.review_note) == (Candidate.ReviewState.DISMISSED, "noise")
    assert not FactCard.objects.exists()


def test_htmx_actions_answer_with_the_row_and_change_events(reviewer_client: Client, make_candidate) -> None:
    candidate = make_candidate()
    response = reviewer_client.post(
        f"/review/{candidate.pk}/dismiss/", {}, headers={"HX-Request": "true", "HX-Target": f"candidate-{candidate.pk}"}
    )
    assert response.status_code == 200
    assert b"<html" not in response.content and b"dismissed" in response.content
    assert "candidatesChanged" in response["HX-Trigger"]


def test_a_reviewed_candidate_cannot_be_reviewed_again(reviewer_client: Client, make_candidate) -> None:
    candidate = make_candidate(review_state=Candidate.ReviewState.DISMISSED)
    reviewer_client.post(f"/review/{candidate.pk}/approve/", {"note": "try"})
    assert not FactCard.objects.exists()


def test_bulk_shows_a_dry_run_count_first(reviewer_client: Client, make_candidate) -> None:
    for n in range(3):
        make_candidate(content=f"Noise {n}.", key=f"k{n}", reasons=["scope_thread"])
    make_candidate(content="Other reason.", reasons=["low_confidence"])
    response = reviewer_client.get("/review/bulk/", {"action": "dismiss", "reason": "scope_thread"})
    assert response.context["count"] == 3
    assert Candidate.objects.filter(review_state=Candidate.ReviewState.PENDING).count() == 4


def test_bulk_refuses_when_the_queue_changed_since_the_dry_run(reviewer_client: Client, make_candidate) -> None:
    make_candidate(reasons=["scope_thread"])
    make_candidate(key="k2", reasons=["scope_thread"])
    reviewer_client.post(
        "/review/bulk/", {"action": "dismiss", "reason": "scope_thread", "confirm": "on", "expected": "1"}
    )
    assert Candidate.objects.filter(review_state=Candidate.ReviewState.PENDING).count() == 2


def test_bulk_dismiss_and_bulk_approve(reviewer_client: Client, make_candidate) -> None:
    for n in range(2):
        make_candidate(content=f"Noise {n}.", key=f"noise{n}", reasons=["scope_thread"])
    for n in range(2):
        make_candidate(content=f"Good {n}.", key=f"good{n}", reasons=["low_confidence"])
    reviewer_client.post(
        "/review/bulk/", {"action": "dismiss", "reason": "scope_thread", "confirm": "on", "expected": "2"}
    )
    assert Candidate.objects.filter(review_state=Candidate.ReviewState.DISMISSED).count() == 2
    # approving in bulk also needs a written reason
    reviewer_client.post(
        "/review/bulk/", {"action": "approve", "reason": "low_confidence", "confirm": "on", "expected": "2"}
    )
    assert not FactCard.objects.exists()
    reviewer_client.post(
        "/review/bulk/",
        {"action": "approve", "reason": "low_confidence", "confirm": "on", "expected": "2", "note": "checked"},
    )
    assert sorted(FactCard.objects.values_list("content", flat=True)) == ["Good 0.", "Good 1."]


def test_the_nav_badge_counts_open_candidates(viewer_client: Client, make_candidate) -> None:
    make_candidate()
    make_candidate(key="x")
    assert b">2</span>" in viewer_client.get("/review/badge/").content


def test_a_pure_duplicate_needs_nobody_and_stays_out_of_the_queue(viewer_client: Client, make_candidate) -> None:
    make_candidate(content="Said again.", reasons=["duplicate"], review_state=Candidate.ReviewState.NONE)
    assert b"Said again." not in viewer_client.get("/review/").content
    assert b"Said again." in viewer_client.get("/review/", {"state": "all"}).content
    assert viewer_client.get("/").context["counts"]["to review"] == 0
