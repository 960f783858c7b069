"""Dashboard: failed and stuck turns with their error, and Retry (one or all)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from facts.intake.queue import record_turn
from facts.models import AuditEvent, ExtractionRun, FactCard, Turn
from tests.factories import fact_candidate
from tests.openai_stub import OpenAIStub

pytestmark = pytest.mark.django_db

MESSAGES = [
    {"role": "user", "content": "我主要做 Python 后端开发，平时请用中文解释技术问题。", "id": "u1"},
    {"role": "assistant", "content": "好的，明白。", "id": "a1"},
]


def _turn(status: str, *, thread: str = "t1", error: str = "", lease_in: float = -5) -> Turn:
    receipt = record_turn(user_id="alice", agent_name="coder", thread_id=thread, messages=MESSAGES)
    Turn.objects.filter(pk__in=receipt.turn_ids).update(
        status=status,
        error=error,
        attempts=5 if status == "failed" else 1,
        claimed_by="dead-worker" if status == "processing" else "",
        lease_until=timezone.now() + timedelta(seconds=lease_in) if status == "processing" else None,
    )
    return Turn.objects.get(pk=receipt.turn_ids[0])


def test_it_lists_failed_and_stuck_turns_with_their_error(viewer_client: Client) -> None:
    failed = _turn("failed", error="the model server answered HTTP 500: <upstream exploded>")
    stuck = _turn("processing", thread="t2")
    _turn("processing", thread="t3", lease_in=60)  # still within its lease: being worked on
    _turn("pending", thread="t4")
    response = viewer_client.get("/turns/")
    assert response.status_code == 200
    assert [t.pk for t in response.context["page"]] == [failed.pk, stuck.pk]
    body = response.content.decode()
    assert "HTTP 500: &lt;upstream exploded&gt;" in body  # escaped
    assert "stuck" in body and "claim lapsed" in body
    assert "/retry/" not in body  # a viewer sees no action


def test_it_links_a_failed_turn_to_its_threads_last_run(viewer_client: Client) -> None:
    failed = _turn("failed", error="the model server answered HTTP 500")
    run = ExtractionRun.objects.create(
        user_id="alice", agent_name="coder", thread_id="t1", status=ExtractionRun.Status.FAILED, error="HTTP 500"
    )
    ExtractionRun.objects.create(user_id="alice", agent_name="coder", thread_id="other")
    _turn("failed", thread="t9", error="no run recorded for this one")

    page = viewer_client.get("/turns/")

    assert [t.last_run_id for t in page.context["page"]] == [run.pk, None] and failed.run_id is None
    assert f'href="/runs/{run.pk}/"' in page.content.decode()


def test_the_htmx_table_is_a_partial_of_the_same_page(viewer_client: Client) -> None:
    _turn("failed", error="boom")
    response = viewer_client.get("/turns/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="turn-rows")
    assert response.status_code == 200
    assert b'<section id="turn-rows">' in response.content and b"<html" not in response.content


def test_a_reviewer_retries_one_turn_and_it_is_extracted(reviewer_client: Client, openai_stub: OpenAIStub) -> None:
    failed = _turn("failed", error="HTTP 500")
    other = _turn("failed", thread="t2", error="HTTP 500")
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    response = reviewer_client.post(f"/turns/{failed.pk}/retry/", {"note": "model is back"})
    assert response.status_code == 302 and response["Location"] == "/turns/"
    failed.refresh_from_db()
    assert failed.status == "done"  # the test backend runs the queued task at once
    assert Turn.objects.get(pk=other.pk).status == "failed"
    event = AuditEvent.objects.get(action="retry_turns")
    assert event.target == f"turn:{failed.pk}" and event.actor == "reviewer" and event.reason == "model is back"
    assert event.details["was"] == "failed" and event.user_id == "alice"
    assert "queued for extraction again" in reviewer_client.get("/turns/").content.decode()


def test_a_stuck_turn_is_retried_without_waiting_for_a_sweep(reviewer_client: Client, openai_stub: OpenAIStub) -> None:
    stuck = _turn("processing")
    ExtractionRun.objects.create(user_id="alice", agent_name="coder", thread_id="t1", claimed_by="dead-worker")
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    reviewer_client.post(f"/turns/{stuck.pk}/retry/")
    stuck.refresh_from_db()
    assert stuck.status == "done" and FactCard.objects.count() == 1
    assert ExtractionRun.objects.get(claimed_by="dead-worker").status == "failed"


def test_retry_all_queues_every_failed_and_stuck_turn(reviewer_client: Client, openai_stub: OpenAIStub) -> None:
    _turn("failed", error="HTTP 500")
    _turn("processing", thread="t2")
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    response = reviewer_client.post("/turns/retry/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="turn-rows")
    assert response.status_code == 200
    assert "turnsChanged" in response["HX-Trigger"]
    body = response.content.decode()
    assert "2 turn(s) queued for extraction again" in body and "No turn is failed or stuck" in body
    assert set(Turn.objects.values_list("status", flat=True)) == {"done"}
    event = AuditEvent.objects.get(action="retry_turns")
    assert event.target == "turns:all" and event.details["count"] == 2


def test_retrying_a_turn_that_is_no_longer_stuck_changes_nothing(reviewer_client: Client) -> None:
    busy = _turn("processing", lease_in=60)
    reviewer_client.post(f"/turns/{busy.pk}/retry/")
    busy.refresh_from_db()
    assert busy.status == "processing" and busy.claimed_by == "dead-worker"
    assert not AuditEvent.objects.exists()
    assert reviewer_client.post("/turns/999999/retry/").status_code == 404


def test_viewers_and_anonymous_users_cannot_retry(viewer_client: Client) -> None:
    failed = _turn("failed", error="HTTP 500")
    assert viewer_client.post(f"/turns/{failed.pk}/retry/").status_code == 403
    assert viewer_client.post("/turns/retry/").status_code == 403
    anonymous = Client()
    assert anonymous.post(f"/turns/{failed.pk}/retry/").status_code == 302  # to the login page
    assert anonymous.get("/turns/").status_code == 302
    assert Turn.objects.get().status == "failed" and not AuditEvent.objects.exists()


def test_retry_needs_a_post_with_the_csrf_token(reviewer) -> None:
    failed = _turn("failed", error="HTTP 500")
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)
    assert client.get(f"/turns/{failed.pk}/retry/").status_code == 405
    assert client.post(f"/turns/{failed.pk}/retry/").status_code == 403
    assert Turn.objects.get().status == "failed"


def test_the_navigation_badge_counts_failed_and_stuck_turns(viewer_client: Client) -> None:
    assert b'class="badge count"' in viewer_client.get("/turns/badge/").content
    assert b"></span>" in viewer_client.get("/turns/badge/").content  # empty: hidden
    _turn("failed", error="boom")
    _turn("processing", thread="t2")
    _turn("processing", thread="t3", lease_in=60)
    assert b">2</span>" in viewer_client.get("/turns/badge/").content
    assert b'hx-get="/turns/badge/"' in viewer_client.get("/").content
