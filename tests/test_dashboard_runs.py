"""Dashboard: extraction runs (list, one run whole, Retry of a failed run) and the
overview's model status."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from facts import tasks
from facts.intake.queue import record_turn
from facts.models import AuditEvent, ExtractionRun, Turn
from tests.factories import fact_candidate
from tests.openai_stub import OpenAIStub

pytestmark = pytest.mark.django_db

MESSAGES = [{"role": "user", "content": "我主要做 Python 后端开发，平时请用中文解释技术问题。", "id": "u1"}]


def _run(
    stub: OpenAIStub, *, fail: bool, user: str = "alice", agent: str = "coder", thread: str = "t1"
) -> ExtractionRun:
    """A run made the way the worker makes one: a turn recorded, then its thread processed."""
    record_turn(user_id=user, agent_name=agent, thread_id=thread, messages=MESSAGES)
    if fail:
        stub.reply_error(500, "upstream <exploded>")
    else:
        stub.reply_tool_call({"facts": [fact_candidate()]})
    tasks.process_thread(user, agent, thread, force=True)
    return ExtractionRun.objects.filter(user_id=user, agent_name=agent, thread_id=thread).latest("pk")


@pytest.fixture
def one_attempt(settings: Any) -> None:
    settings.MEMORY_EXTRACTION_MAX_ATTEMPTS = 1


def test_it_lists_runs_filtered_by_status_user_and_agent(viewer_client: Client, openai_stub: OpenAIStub) -> None:
    failed = _run(openai_stub, fail=True)
    ok = _run(openai_stub, fail=False, user="bob", thread="t2")
    other_agent = _run(openai_stub, fail=False, agent="writer", thread="t3")
    assert [r.pk for r in viewer_client.get("/runs/").context["page"]] == [other_agent.pk, ok.pk, failed.pk]
    assert [r.pk for r in viewer_client.get("/runs/?status=failed").context["page"]] == [failed.pk]
    assert [r.pk for r in viewer_client.get("/runs/?user=bob").context["page"]] == [ok.pk]
    assert [r.pk for r in viewer_client.get("/runs/?agent=writer").context["page"]] == [other_agent.pk]
    assert "1 accepted · 0 rejected" in viewer_client.get("/runs/?user=bob").content.decode()
    body = viewer_client.get("/runs/?status=failed").content.decode()
    assert f'href="/runs/{failed.pk}/"' in body and "upstream &lt;exploded&gt;" in body
    assert viewer_client.get("/runs/?status=bogus").context["form"].errors["status"]


def test_it_pages_the_runs(viewer_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dashboard.views.runs.PAGE_SIZE", 2)
    for i in range(5):
        ExtractionRun.objects.create(user_id="alice", agent_name="coder", thread_id=f"t{i}", status="failed")
    response = viewer_client.get("/runs/?status=failed&page=3")
    assert len(response.context["page"]) == 1
    assert "page 3 of 3" in response.content.decode()
    assert 'href="?status=failed&amp;page=2"' in response.content.decode()


def test_a_run_page_shows_request_answer_tokens_and_every_candidate(
    viewer_client: Client, openai_stub: OpenAIStub
) -> None:
    run = _run(openai_stub, fail=False)
    candidate = run.candidates.get()
    body = viewer_client.get(f"/runs/{run.pk}/").content.decode()
    assert "我主要做 Python 后端开发" in body  # the filtered conversation
    assert "You maintain long-term memory about one user" in body  # the rules as sent
    assert "120 in · 40 out" in body  # the stub's token usage
    assert f'href="/review/{candidate.pk}/"' in body and "accepted" in body
    assert "primary_stack" in body or candidate.key in body
    assert "Retry" not in body  # it succeeded


def test_a_failed_run_keeps_what_was_sent_and_why_it_failed(
    viewer_client: Client, openai_stub: OpenAIStub, one_attempt: None
) -> None:
    run = _run(openai_stub, fail=True)
    assert run.status == "failed" and "HTTP 500" in run.error
    assert run.request["rules_version"] and run.request["messages"] == 1
    body = viewer_client.get(f"/runs/{run.pk}/").content.decode()
    assert "HTTP 500" in body and "You maintain long-term memory" in body
    assert "a reviewer can retry them" in body and "/retry/" not in body  # a viewer has no button


def test_a_reviewer_retries_a_failed_run_and_it_succeeds(
    reviewer_client: Client, openai_stub: OpenAIStub, one_attempt: None
) -> None:
    run = _run(openai_stub, fail=True)
    turn = Turn.objects.get(user_id="alice")
    assert turn.status == "failed"
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    response = reviewer_client.post(f"/runs/{run.pk}/retry/", {"note": "model is back"})
    new = ExtractionRun.objects.latest("pk")
    assert new.pk != run.pk and new.status == "succeeded"
    assert response.status_code == 302 and response["Location"] == f"/runs/{new.pk}/"
    turn.refresh_from_db()
    assert turn.status == "done" and turn.run_id == new.pk
    event = AuditEvent.objects.get(action="retry_turns")
    assert event.target == f"run:{run.pk}" and event.reason == "model is back"
    # The old run now points to the one that processed its turns, with no button.
    body = reviewer_client.get(f"/runs/{run.pk}/").content.decode()
    assert f'href="/runs/{new.pk}/"' in body and "/retry/" not in body


def test_retry_waits_for_a_failed_run_whose_turns_wait_out_a_backoff(
    reviewer_client: Client, openai_stub: OpenAIStub
) -> None:
    run = _run(openai_stub, fail=True)  # attempts left: the turn is pending with a backoff
    assert Turn.objects.get(user_id="alice").status == "pending"
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    reviewer_client.post(f"/runs/{run.pk}/retry/")
    assert Turn.objects.get(user_id="alice").status == "done"


def test_only_reviewers_retry_and_only_failed_runs(
    viewer_client: Client, reviewer_client: Client, openai_stub: OpenAIStub
) -> None:
    ok = _run(openai_stub, fail=False)
    failed = _run(openai_stub, fail=True, thread="t2")
    assert viewer_client.post(f"/runs/{failed.pk}/retry/").status_code == 403
    assert reviewer_client.get(f"/runs/{failed.pk}/retry/").status_code == 405
    before = ExtractionRun.objects.count()
    response = reviewer_client.post(f"/runs/{ok.pk}/retry/", follow=True)
    assert "did not fail" in response.content.decode()
    assert ExtractionRun.objects.count() == before and not AuditEvent.objects.filter(action="retry_turns").exists()


def test_it_answers_404_for_runs_that_do_not_exist(reviewer_client: Client) -> None:
    assert reviewer_client.get("/runs/999999/").status_code == 404
    assert reviewer_client.post("/runs/999999/retry/").status_code == 404
    assert reviewer_client.get("/runs/abc/").status_code == 404


def test_it_requires_a_login(client: Client) -> None:
    assert client.get("/runs/").status_code == 302


def test_the_overviews_failed_rows_link_to_their_run(viewer_client: Client, openai_stub: OpenAIStub) -> None:
    run = _run(openai_stub, fail=True)
    body = viewer_client.get("/").content.decode()
    assert f'<tr class="row-failed"><td><a href="/runs/{run.pk}/">#{run.pk}</a>' in body


# --- model status ------------------------------------------------------------------


def test_the_overview_says_no_model_is_configured(viewer_client: Client, settings: Any) -> None:
    settings.MEMORY_LLM_BASE_URL = ""
    settings.MEMORY_EXTRACTOR = ""
    body = viewer_client.get("/").content.decode()
    assert "No model is connected" in body
    for name in ("MEMORY_LLM_BASE_URL", "MEMORY_LLM_MODEL", "MEMORY_LLM_API_KEY"):
        assert f"<code>{name}</code>" in body


def test_the_overview_is_quiet_when_the_model_answers(viewer_client: Client, openai_stub: OpenAIStub) -> None:
    body = viewer_client.get("/").content.decode()
    assert 'id="model-status"' not in body


def test_the_overview_says_when_the_model_does_not_answer(viewer_client: Client, openai_stub: OpenAIStub) -> None:
    url = openai_stub.url
    openai_stub.stop()
    response = viewer_client.get("/")
    body = response.content.decode()
    assert "The model does not answer" in body and url.rsplit("/", 1)[0] in body
    assert "<code>MEMORY_LLM_BASE_URL</code>" in body


def test_the_model_check_is_cached_briefly_and_bounded(
    viewer_client: Client, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket
    import time

    # A server that accepts connections and never answers: the check gives up after ~1 s.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    settings.MEMORY_LLM_BASE_URL = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    try:
        started = time.perf_counter()
        first = viewer_client.get("/").content.decode()
        slow = time.perf_counter() - started
        started = time.perf_counter()
        viewer_client.get("/")
        cached = time.perf_counter() - started
    finally:
        listener.close()
    assert "does not answer within 1 s" in first
    assert 0.9 < slow < 3.0 and cached < 0.9


def test_a_run_keeps_the_facts_it_was_shown_by_id_never_their_text(
    viewer_client: Client, openai_stub: OpenAIStub
) -> None:
    first = _run(openai_stub, fail=False)
    fact_id = first.candidates.get().fact_id
    second = _run(openai_stub, fail=False, thread="t2")
    assert fact_id in second.request["existing_fact_ids"]
    shown = openai_stub.requests[-1]["messages"][1]["content"]
    content = first.candidates.get().content
    assert content in shown  # the model saw the stored fact's text…
    assert content not in str(second.request)  # …the run keeps only its id
    body = viewer_client.get(f"/runs/{second.pk}/").content.decode()
    assert f'href="/facts/{fact_id}/"' in body
