"""Runs in a real browser: the overview's red row opens the failed run, a reviewer
retries it once the model answers, and the new run has succeeded."""

from __future__ import annotations

import re
from typing import Any

import pytest

from facts import tasks
from facts.intake.queue import record_turn
from facts.models import ExtractionRun, Turn
from tests.factories import fact_candidate
from tests.openai_stub import OpenAIStub
from tests.test_browser_dashboard import browser, csp_violations, login, page, shot  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_reviewer_opens_a_failed_run_from_the_overview_and_retries_it(
    page: Any,  # noqa: F811
    openai_stub: OpenAIStub,
    settings: Any,
) -> None:
    settings.MEMORY_EXTRACTION_MAX_ATTEMPTS = 1
    record_turn(
        user_id="alice",
        agent_name="coder",
        thread_id="t1",
        messages=[{"id": "u1", "role": "user", "content": "我主要做 Python 后端开发，平时请用中文解释技术问题。"}],
    )
    openai_stub.reply_error(503, "the model is loading")
    tasks.process_thread("alice", "coder", "t1", force=True)
    failed = ExtractionRun.objects.get()
    assert failed.status == "failed"

    login(page)
    row = page.locator("tr.row-failed", has_text=f"#{failed.pk}")
    assert "HTTP 503" in row.inner_text()
    shot(page, "runs-01-overview-failed-row")
    row.locator(f"a[href='/runs/{failed.pk}/']").click()
    page.wait_for_url(re.compile(rf"/runs/{failed.pk}/$"))
    assert page.inner_text("#run-status") == "failed"
    assert "HTTP 503" in page.inner_text("#run-error")
    assert "the current rules" in page.inner_text("#run-request")
    shot(page, "runs-02-failed-run")

    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    page.fill("#run-retry input[name=note]", "the model is up again")
    page.click("#run-retry button[type=submit]")
    page.wait_for_selector("text=was retried")
    new = ExtractionRun.objects.latest("pk")
    assert new.pk != failed.pk and new.status == "succeeded"
    assert page.url.endswith(f"/runs/{new.pk}/")
    assert page.inner_text("#run-status") == "succeeded"
    assert "accepted" in page.inner_text("#run-candidates")
    assert Turn.objects.get().status == "done"
    shot(page, "runs-03-retried-run")

    page.click("nav >> text=Runs")
    page.select_option("select[name=status]", "failed")
    page.wait_for_url(re.compile(r"status=failed"))
    page.wait_for_selector(f"#run-{failed.pk}")
    assert page.locator(f"#run-{new.pk}").count() == 0
    shot(page, "runs-04-list-failed")


def test_the_overview_names_the_settings_when_the_model_does_not_answer(
    page: Any,  # noqa: F811
    openai_stub: OpenAIStub,
) -> None:
    openai_stub.stop()
    login(page, "viewer")
    status = page.inner_text("#model-status")
    assert "The model does not answer" in status
    for name in ("MEMORY_LLM_BASE_URL", "MEMORY_LLM_MODEL", "MEMORY_LLM_API_KEY"):
        assert name in status
    shot(page, "runs-05-model-down")
