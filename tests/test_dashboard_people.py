"""People pages: a person's agents, facts and conversations, and erasing them (admins,
dry run first, typed confirmation, CSRF)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from facts.judging.pipeline import run_turns_now
from facts.models import AuditEvent, Erasure, FactCard, Turn
from tests.erasure_seed import XENA_WORDS, turns

pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded() -> None:
    for t in turns():
        run_turns_now(**t)


def test_it_sends_the_old_people_addresses_to_the_users_pages(seeded: None, viewer_client: Client) -> None:
    assert viewer_client.get("/people/")["Location"] == "/users/"
    # A path-like id (only `ingest` accepts one) that memory holds keeps its page.
    Turn.objects.create(user_id="a/b?c#d", agent_name="coder", thread_id="t", messages=[])
    assert viewer_client.get("/people/user/", {"user": "a/b?c#d"})["Location"] == "/users/a/b%3Fc%23d/"
    assert viewer_client.get("/people/user/", {"user": "nobody-x"})["Location"] == "/users/"


def test_it_shows_a_dry_run_then_needs_the_typed_user_id_to_erase_a_person(seeded: None, admin_client_: Client) -> None:
    preview = admin_client_.get("/people/user/erase/", {"user": "xena"})
    counts = {kind: count for kind, count, _ids in preview.context["rows"]}
    assert counts["cards"] == 2 and counts["turns"] == 2
    assert FactCard.objects.filter(user_id="xena").count() == 2  # the dry run changed nothing
    assert b'class="error"' not in preview.content  # nothing was tried yet: no error shown

    wrong = admin_client_.post("/people/user/erase/", {"user": "xena", "confirm": "xen"})
    assert wrong.status_code == 400
    assert FactCard.objects.filter(user_id="xena").count() == 2

    done = admin_client_.post("/people/user/erase/", {"user": "xena", "confirm": "xena"})
    assert done.status_code == 302
    assert not FactCard.objects.filter(user_id="xena").exists() and not Turn.objects.filter(user_id="xena").exists()
    event = AuditEvent.objects.get(action="erase")
    assert event.actor == "boss" and XENA_WORDS["thread2_fact"] not in str(event.details)
    assert FactCard.objects.filter(user_id="yuri").exists()


def test_it_lets_only_admins_erase_a_person(seeded: None, reviewer_client: Client) -> None:
    assert reviewer_client.get("/people/user/erase/", {"user": "xena"}).status_code == 403
    assert reviewer_client.post("/people/user/erase/", {"user": "xena", "confirm": "xena"}).status_code == 403
    assert FactCard.objects.filter(user_id="xena").count() == 2


def test_it_needs_the_csrf_token_to_erase(seeded: None, admin_user: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    response = client.post("/people/user/erase/", {"user": "xena", "confirm": "xena"})
    assert response.status_code == 403
    assert not Erasure.objects.exists()


def test_it_forgets_a_conversations_turns_and_candidates_after_the_typed_thread_id(
    seeded: None, admin_client_: Client
) -> None:
    query = {"user": "xena", "agent": "coder", "thread": "x-t1"}
    preview = admin_client_.get("/forget/", query)
    counts = {kind: count for kind, count, _ids in preview.context["rows"]}
    assert counts["turns"] == 1 and counts["candidates"] == 4 and counts["project_cards"] == 1

    assert admin_client_.post("/forget/", query | {"confirm": "x-t2"}).status_code == 400
    admin_client_.post("/forget/", query | {"confirm": "x-t1"})

    assert list(Turn.objects.filter(user_id="xena").values_list("thread_id", flat=True)) == ["x-t2"]
    assert list(FactCard.objects.filter(user_id="xena").values_list("key", flat=True)) == ["tea"]
