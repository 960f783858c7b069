"""A fact's history: each revision says what it changed (its fields, its content's diff),
never the whole front matter again, and its revert control sits beside it, not folded
away (issue 37)."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from facts.models import FactCard
from facts.storage.writer import save_card
from tests.test_dashboard_facts import correct

pytestmark = pytest.mark.django_db


def _revision(html: str, number: int) -> str:
    match = re.search(rf'<div class="version" id="revision-{number}">(.*?)\n  </div>', html, re.S)
    assert match, f"revision {number} is listed"
    return match.group(1)


def test_a_correction_lists_only_the_fields_it_changed_and_the_contents_diff(
    reviewer_client: Client, make_card
) -> None:
    card = save_card(make_card(content="Prefers tabs.", key="indentation"), actor="seed")
    correct(reviewer_client, card, content="Prefers four spaces.", category="correction", confidence="0.9")
    html = reviewer_client.get(f"/facts/{card.id}/").content.decode()

    second = _revision(html, 2)
    assert '<span class="del">-Prefers tabs.</span>' in second
    assert '<span class="add">+Prefers four spaces.</span>' in second
    assert re.search(r"category</span> <del>preference</del> → <ins>correction</ins>", second)
    assert re.search(r"confidence</span> <del>0.9</del> → <ins>0.9</ins>", second) is None  # unchanged: not listed
    for unchanged in ("user_id", "agent_name", "created_at", "key</span>", "updated_at", "id</span>"):
        assert unchanged not in second, unchanged

    first = _revision(html, 1)
    assert "Prefers tabs." in first and "indentation" in first
    assert "user_id" not in first and "created_at" not in first and "---" not in first


def test_the_revert_control_sits_beside_each_older_revision_not_inside_a_fold(
    reviewer_client: Client, make_card
) -> None:
    card = save_card(make_card(content="One."), actor="seed")
    correct(reviewer_client, card, content="Two.")
    correct(reviewer_client, card, content="Three.", reason="again")
    html = reviewer_client.get(f"/facts/{card.id}/").content.decode()
    history = html[html.index('id="history"') :]
    assert "<details" not in history
    for older in (1, 2):
        assert f'action="/facts/{card.id}/revert/{older}/"' in _revision(html, older)
    assert "/revert/3/" not in html  # the current revision has nothing to revert to
    assert FactCard.objects.get(id=card.id).revision == 3


def test_a_viewer_sees_the_history_without_revert_controls(viewer_client: Client, make_card) -> None:
    card = save_card(make_card(content="One."), actor="seed")
    card = save_card(card.model_copy(update={"content": "Two."}), actor="seed")
    html = viewer_client.get(f"/facts/{card.id}/").content.decode()
    assert "+Two." in _revision(html, 2) and "/revert/" not in html
