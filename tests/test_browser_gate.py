"""The gate analytics journeys in a real browser: where reviewers disagree, a backtest
and applying its threshold, and what an agent saw."""

from __future__ import annotations

import re
from typing import Any

import pytest

from facts.judging import runs
from facts.models import AuditEvent
from facts.storage.writer import save_card
from memoryadmin import api_service
from tests.factories import fact_candidate
from tests.test_backtest import record
from tests.test_browser_dashboard import browser, csp_violations, login, page, shot  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_see_overturned_rejections_backtest_a_lower_threshold_and_apply_it(
    page: Any,  # noqa: F811
    make_candidate: Any,
    store: Any,
    settings: Any,
) -> None:
    settings.MEMORY_CONFIDENCE_THRESHOLD = 0.7
    for state in ("approved", "approved", "dismissed"):
        make_candidate(review_state=state)
    [guess] = record({"facts": [fact_candidate(confidence=0.65)]})
    login(page, "admin")
    page.click("nav >> text=Gate")
    page.wait_for_selector('tr[data-reason="low_confidence"]')
    cells = page.locator('tr[data-reason="low_confidence"] td').all_inner_texts()
    assert cells == ["low_confidence", "3", "2", "1", "67 %", "1"]
    shot(page, "gate-01-agreement")
    page.click('tr[data-reason="low_confidence"] a.overturned')
    page.wait_for_url(re.compile(r"/review/\?.*state=approved"))
    assert page.locator("a[href^='/review/'][href$='/']").count() >= 2
    shot(page, "gate-02-overturned-in-queue")

    page.goto("/gate/backtest/")
    page.fill("input[name=threshold]", "0.6")
    page.click("#backtest-form button[type=submit]")
    page.wait_for_selector("#backtest-report")
    assert page.inner_text("#flip-count") == "1"
    assert page.locator(f"a[href='/review/{guess.pk}/']").count() == 1
    shot(page, "gate-03-backtest")
    page.fill("#apply-threshold textarea[name=reason]", "Reviewers keep approving 0.6-0.7.")
    page.click("#apply-threshold button[type=submit]")
    page.wait_for_selector("text=The gate's threshold is now 0.6")
    assert page.inner_text("#threshold-now") == "0.6"
    shot(page, "gate-04-applied")
    assert AuditEvent.objects.filter(action="settings", target="gate.threshold").count() == 1
    assert runs.threshold_in_force() == 0.6


def test_what_the_agent_saw_from_the_fact_page(page: Any, make_card: Any, settings: Any) -> None:  # noqa: F811
    settings.API_USAGE_FLUSH_SECONDS = 0
    card = save_card(make_card(content="Deploys with Docker Compose."), actor="t")
    api_service.serve_context(api_service.Scope("alice", "coder"), door="mcp")
    login(page, "viewer")
    page.goto(f"/facts/{card.id}/")
    page.wait_for_selector("#last-shown a")
    shot(page, "gate-05-fact-last-shown")
    page.click("#last-shown a")
    page.wait_for_selector("#seen-context")
    assert "Deploys with Docker Compose." in page.inner_text("#seen-context")
    assert "via mcp" in page.inner_text("#seen-context")
    shot(page, "gate-06-what-the-agent-saw")
