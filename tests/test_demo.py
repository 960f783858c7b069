"""The shipped demo data goes through the real pipeline and shows every reason code."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from facts.judging.gate import REASON_CODES
from facts.models import Candidate, FactCard
from facts.storage.store import Store

pytestmark = pytest.mark.django_db


def test_the_demo_shows_accepted_and_rejected_candidates_with_every_reason_code() -> None:
    out = io.StringIO()
    call_command("demo", stdout=out)
    assert "conversation(s) ingested" in out.getvalue()
    assert Candidate.objects.filter(verdict="accepted").exists()
    seen = {code for reasons in Candidate.objects.values_list("reasons", flat=True) for code in reasons}
    assert seen == set(REASON_CODES)


def test_the_demo_has_two_users_several_agents_and_project_cards(store: Store) -> None:
    call_command("demo", stdout=io.StringIO())
    live = FactCard.objects.filter(status="active")
    assert set(live.exclude(user_id="").values_list("user_id", flat=True)) == {"li.wei@example.com", "sam.taylor"}
    assert set(live.values_list("project_id", flat=True)) >= {"shop-api", "data-pipeline"}
    assert live.exclude(user_id="").values("agent_name").distinct().count() >= 2
    assert store.read_profile("li.wei@example.com").section("topOfMind").summary.startswith("接下来几个月")


def test_the_demo_corrections_supersede_the_old_habit() -> None:
    call_command("demo", stdout=io.StringIO())
    style = FactCard.objects.filter(user_id="li.wei@example.com", key="code_explanation_style")
    assert sorted(style.values_list("status", flat=True)) == ["active", "superseded"]
    assert style.get(status="active").category == "correction"
    language = FactCard.objects.get(user_id="li.wei@example.com", key="response_language")
    assert language.confirmation_count == 1


def test_loading_the_demo_twice_changes_nothing() -> None:
    call_command("demo", stdout=io.StringIO())
    before = list(FactCard.objects.order_by("id").values_list("id", "revision", "file_sha256"))
    candidates = Candidate.objects.count()
    out = io.StringIO()
    call_command("demo", stdout=out)
    assert "already loaded" in out.getvalue()
    assert list(FactCard.objects.order_by("id").values_list("id", "revision", "file_sha256")) == before
    assert Candidate.objects.count() == candidates
