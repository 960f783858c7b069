"""Words and states a curator met in a newcomer's trial (issue 37): each page says what
is true now, in the curators' words."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from facts.judging.pipeline import run_turns_now
from facts.models import ExtractionRun
from tests.factories import fact_candidate
from tests.test_backtest import record

pytestmark = pytest.mark.django_db


def _side_panel(html: str) -> str:
    match = re.search(r'<div class="side" id="same-key-card">(.*?)</div>', html, re.S)
    assert match, "the candidate page shows the card of the same key"
    return match.group(1)


def test_before_an_approve_the_side_panel_says_approval_replaces_the_live_card(
    reviewer_client: Client, make_candidate: Any, make_card: Any
) -> None:
    from facts.storage.writer import save_card

    save_card(make_card(key="response_language", content="Prefers answers in German."), actor="t")
    candidate = make_candidate()
    panel = _side_panel(reviewer_client.get(f"/review/{candidate.pk}/").content.decode())
    assert "Existing card (same key)" in panel and "approval replaces it" in panel


def test_after_an_approve_the_side_panel_names_the_card_the_approval_wrote(
    reviewer_client: Client, make_candidate: Any
) -> None:
    candidate = make_candidate()
    response = reviewer_client.post(f"/review/{candidate.pk}/approve/", {"note": "She said so twice."})
    assert response.status_code == 302
    candidate.refresh_from_db()
    assert candidate.review_state == "approved" and candidate.fact_id

    panel = _side_panel(reviewer_client.get(f"/review/{candidate.pk}/").content.decode())
    assert "approval replaces it" not in panel and "Existing card" not in panel
    assert "Its card" in panel and "written when this candidate was approved" in panel
    assert candidate.fact_id in panel


def test_a_dismissed_candidate_does_not_promise_what_approval_would_do(
    reviewer_client: Client, make_candidate: Any
) -> None:
    candidate = make_candidate(review_state="dismissed")
    panel = _side_panel(reviewer_client.get(f"/review/{candidate.pk}/").content.decode())
    assert "approval" not in panel and "No live card has this key now." in panel


def test_a_rules_run_does_not_say_its_time_was_spent_in_a_model(viewer_client: Client, settings: Any) -> None:
    settings.MEMORY_LLM_BASE_URL = ""  # the built-in rules extract
    run_turns_now(
        user_id="alice",
        agent_name="coder",
        thread_id="t-rules",
        messages=[{"id": "m1", "role": "user", "content": "I prefer Python for every script I write."}],
    )
    run = ExtractionRun.objects.get(thread_id="t-rules")
    assert run.extractor == "rules" and run.model_ms is not None
    html = viewer_client.get(f"/runs/{run.pk}/").content.decode()
    assert "no model was called" in html
    assert "in the model" not in html
    assert "in the built-in rules" in html


@pytest.mark.parametrize(
    ("url", "current"),
    [("/", "Overview"), ("/gate/", "Gate"), ("/gate/backtest/", "Gate"), ("/review/", "Review"), ("/facts/", "Facts")],
)
def test_the_nav_marks_only_the_current_page(viewer_client: Client, url: str, current: str) -> None:
    html = viewer_client.get(url).content.decode()
    nav = html[html.index('<nav class="nav">') : html.index("</nav>")]
    marked = re.findall(r'<a href="[^"]*" aria-current="page">([^<]+)', nav)
    assert [m.strip() for m in marked] == [current]


def test_the_add_fact_page_is_marked_as_facts(reviewer_client: Client) -> None:
    html = reviewer_client.get("/facts/add/").content.decode()
    nav = html[html.index('<nav class="nav">') : html.index("</nav>")]
    assert [m.strip() for m in re.findall(r'<a href="[^"]*" aria-current="page">([^<]+)', nav)] == ["Facts"]


def test_a_signed_in_curators_pages_are_never_stored_by_the_browser(viewer_client: Client, make_card: Any) -> None:
    from facts.storage.writer import save_card

    card = make_card()
    save_card(card, actor="t")
    for url in (f"/facts/{card.id}/", "/facts/", "/review/", "/"):
        cache = viewer_client.get(url)["Cache-Control"]
        assert "no-store" in cache and "no-cache" in cache, url


def test_the_backtest_names_verdict_changes_in_words_not_codes(viewer_client: Client, store: Any) -> None:
    record({"facts": [fact_candidate(confidence=0.65)]})
    html = viewer_client.get("/gate/backtest/?threshold=0.6").content.decode()
    assert "rejected->accepted" not in html and "-&gt;" not in html
    assert "rejected → written: 1" in html
