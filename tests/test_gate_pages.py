"""Gate analytics pages: reviewer agreement, the backtest, applying a threshold, and
what an agent saw."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from facts.judging import runs
from facts.models import AuditEvent, Candidate, GateSettings
from facts.storage.writer import save_card
from memoryadmin import api_service
from tests.factories import fact_candidate
from tests.test_backtest import record

pytestmark = pytest.mark.django_db


@pytest.fixture
def review_history(make_candidate: Any) -> None:
    """Scripted: low_confidence overturned twice, upheld once, one waiting; a
    transactional grant upheld; an evidence_missing one (agent `writer`) overturned."""
    for state in ("approved", "approved", "dismissed", "pending"):
        make_candidate(review_state=state)
    make_candidate(reasons=["transactional", "low_confidence"], review_state="dismissed")
    make_candidate(reasons=["evidence_missing"], agent_name="writer", review_state="approved")
    make_candidate(verdict="accepted", reasons=[], review_state="none")  # not a rejection


def _row(html: str, attr: str, label: str) -> list[str]:
    row = re.search(rf'<tr data-{attr}="{label}">(.*?)</tr>', html, re.S)
    assert row, f"no row for {label}"
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td>(.*?)</td>", row.group(1), re.S)]


def test_it_counts_reviews_per_reason_code_and_per_agent(viewer_client: Client, review_history: None) -> None:
    html = viewer_client.get("/gate/").content.decode()
    # reason, reviewed, overturned, upheld, rate, waiting
    assert _row(html, "reason", "low_confidence") == ["low_confidence", "4", "2", "2", "50 %", "1"]
    assert _row(html, "reason", "transactional") == ["transactional", "1", "0", "1", "0 %", "0"]
    assert _row(html, "reason", "evidence_missing") == ["evidence_missing", "1", "1", "0", "100 %", "0"]
    assert _row(html, "agent", "coder") == ["coder", "4", "2", "2", "50 %", "1"]
    assert _row(html, "agent", "writer") == ["writer", "1", "1", "0", "100 %", "0"]


def test_each_number_links_to_the_candidates_behind_it(viewer_client: Client, review_history: None) -> None:
    html = viewer_client.get("/gate/").content.decode()
    row = re.search(r'<tr data-reason="low_confidence">(.*?)</tr>', html, re.S).group(1)
    overturned = re.search(r'<a href="([^"]+)" class="overturned">', row).group(1).replace("&amp;", "&")
    queue = viewer_client.get(overturned).content.decode()
    shown = set(map(int, re.findall(r'href="/review/(\d+)/"', queue)))
    expected = {c.pk for c in Candidate.objects.filter(review_state="approved", agent_name="coder")}
    assert shown == expected and len(shown) == 2
    reviewed = re.findall(r'<a href="([^"]+)">4</a>', row)[0].replace("&amp;", "&")
    assert len(set(re.findall(r'href="/review/(\d+)/"', viewer_client.get(reviewed).content.decode()))) == 4


def test_the_period_narrows_the_numbers(viewer_client: Client, review_history: None) -> None:
    html = viewer_client.get("/gate/?since=2001-01-01&until=2001-01-02").content.decode()
    assert "No rejections with these filters." in html


def test_the_backtest_page_lists_the_flips(viewer_client: Client, store: Any) -> None:
    [guess] = record({"facts": [fact_candidate(confidence=0.65)]})
    html = viewer_client.get("/gate/backtest/?threshold=0.6").content.decode()
    assert '<span id="flip-count">1</span>' in html and f'href="/review/{guess.pk}/"' in html
    assert "rejected" in html and "low_confidence" in html
    assert 'id="apply-threshold"' not in html  # a viewer may not apply it


def test_applying_a_threshold_is_an_audited_admin_action(
    viewer_client: Client, admin_client_: Client, settings: Any
) -> None:
    settings.MEMORY_CONFIDENCE_THRESHOLD = 0.7
    assert viewer_client.post("/gate/threshold/", {"threshold": "0.6", "reason": "x"}).status_code == 403
    assert not GateSettings.objects.exists()
    response = admin_client_.post("/gate/threshold/", {"threshold": "0.6", "reason": "reviewers overturn 0.6-0.7"})
    assert response.status_code == 302
    ctx = runs.Context.from_settings(user_id="a", agent_name="b", thread_id="", project_id=None, rows=[])
    assert ctx.threshold == 0.6
    event = AuditEvent.objects.get(action="settings")
    assert (event.reason, event.details) == ("reviewers overturn 0.6-0.7", {"threshold_before": 0.7, "threshold": 0.6})
    assert "0.6" in admin_client_.get("/gate/").content.decode()


def test_the_injections_page_shows_what_the_agent_saw(viewer_client: Client, make_card: Any) -> None:
    card = save_card(make_card(content="Prefers answers in English."), actor="t")
    api_service.serve_context(api_service.Scope("alice", "coder"))
    html = viewer_client.get("/injections/?user=alice&agent=coder").content.decode()
    assert "Prefers answers in English." in html and card.id in html
    fact_page = viewer_client.get(f"/facts/{card.id}/").content.decode()
    shown = re.search(r'<dd id="last-shown">(.*?)</dd>', fact_page, re.S).group(1)
    assert "context to alice × coder via api" in shown
    link = re.search(r'href="(/injections/[^"]+)"', shown).group(1).replace("&amp;", "&")
    assert "Prefers answers in English." in viewer_client.get(link).content.decode()


def test_the_injections_page_asks_for_a_user(viewer_client: Client) -> None:
    html = viewer_client.get("/injections/?agent=coder").content.decode()
    assert "Give the user" in html
