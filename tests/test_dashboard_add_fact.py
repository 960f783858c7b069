"""Add a fact by hand (issue 37): a curator writes a user's or a project's fact; it is
checked like an agent's input, written through the one write function with source kind
`manual`, audited, and in the context preview at once. Viewers cannot."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from facts.models import AuditEvent, FactCard, FactRevision
from facts.storage.store import Bucket, Store
from facts.storage.writer import save_card

pytestmark = pytest.mark.django_db

GOOD = {
    "scope": "user",
    "user": "alice@example.com",
    "agent": "coder",
    "project": "",
    "key": "Response Language",
    "category": "preference",
    "content": "Prefers answers in English.",
    "reason": "She said so on the phone.",
}


def add(client: Client, **changes: Any):
    return client.post("/facts/add/", {**GOOD, **changes})


def test_a_reviewer_adds_a_users_fact_and_the_preview_shows_it_at_once(reviewer_client: Client, store: Store) -> None:
    response = add(reviewer_client)
    card = FactCard.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/facts/{card.id}/"
    assert (card.user_id, card.agent_name, card.key, card.status) == (
        "alice@example.com",
        "coder",
        "response_language",
        "active",
    )

    written = store.read_card(Bucket(user_id="alice@example.com", agent_name="coder"), card.id)
    assert written.content == "Prefers answers in English."
    assert written.source.kind == "manual"
    assert FactRevision.objects.get(fact_id=card.id).actor == "reviewer"  # a card names its writer per revision
    event = AuditEvent.objects.get(action="add_fact")
    assert (event.actor, event.target, event.user_id, event.agent_name) == (
        "reviewer",
        card.id,
        "alice@example.com",
        "coder",
    )
    assert event.reason == "She said so on the phone." and event.details["source"] == "manual"
    assert "Prefers answers in English." not in str(event.details)  # the audit keeps ids, not content

    page = reviewer_client.get(response["Location"]).content.decode()
    assert "live now, in the context preview" in page and "manual" in page
    preview = reviewer_client.get("/preview/", {"user": "alice@example.com", "agent": "coder"}).content.decode()
    assert "Prefers answers in English." in preview


def test_a_project_fact_goes_to_the_projects_bucket(reviewer_client: Client, store: Store) -> None:
    response = add(
        reviewer_client, scope="project", user="", agent="", project="shop-api", content="Uses PostgreSQL 16."
    )
    card = FactCard.objects.get()
    assert response.status_code == 302
    assert (card.user_id, card.project_id) == ("", "shop-api")
    assert store.read_card(Bucket(project_id="shop-api"), card.id).source.kind == "manual"


def test_a_fact_with_the_key_of_an_active_card_replaces_it(reviewer_client: Client, make_card: Any) -> None:
    old = save_card(
        make_card(user_id="alice@example.com", key="response_language", content="Prefers German."), actor="t"
    )
    response = add(reviewer_client)
    assert response.status_code == 302
    assert FactCard.objects.get(id=old.id).status == "superseded"
    new = FactCard.objects.get(status="active")
    assert AuditEvent.objects.get(action="add_fact").details["replaced"] == old.id
    assert f"replaces {old.id}" in reviewer_client.get(response["Location"]).content.decode()
    assert new.content == "Prefers answers in English."


def test_the_same_content_again_adds_nothing(reviewer_client: Client) -> None:
    add(reviewer_client)
    response = add(reviewer_client, key="another_key")
    assert FactCard.objects.count() == 1 and AuditEvent.objects.filter(action="add_fact").count() == 1
    assert "already says exactly this" in reviewer_client.get(response["Location"]).content.decode()


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"user": ""}, "user", "is required"),
        ({"user": "../etc"}, "user", "must not contain '/'"),
        ({"user": "a" * 201}, "user", "longer than 200"),
        ({"user": "al\x07ice"}, "user", "control characters"),
        ({"agent": "Coder Bot!"}, "agent", "lower-case letters"),
        ({"scope": "project", "project": ""}, "project", "is required"),
        ({"key": "   "}, "key", "This field is required"),
        ({"key": "café-ünïcode!"}, "key", "letters, digits and underscores"),
        ({"key": "k" * 81}, "key", "longer than 80"),
        ({"content": "Prefers\x07 tabs."}, "content", "control characters"),
        ({"content": "Prefers\x00 tabs."}, "content", "Null characters are not allowed"),
        ({"content": "x" * 401}, "content", "longer than 400"),
        ({"category": "gossip"}, "category", "Select a valid choice"),
    ],
)
def test_bad_input_is_refused_with_the_typed_text_kept(
    reviewer_client: Client, changes: dict[str, str], field: str, words: str
) -> None:
    response = add(reviewer_client, **changes)
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert words in " ".join(errors.get(field, [])), errors
    assert not FactCard.objects.exists() and not AuditEvent.objects.filter(action="add_fact").exists()
    if field != "content":
        assert "Prefers answers in English." in response.content.decode()  # nothing typed is lost


def test_viewers_cannot_add_facts(viewer_client: Client) -> None:
    assert viewer_client.get("/facts/add/").status_code == 403
    assert add(viewer_client).status_code == 403
    assert not FactCard.objects.exists()
    assert 'id="add-fact"' not in viewer_client.get("/facts/").content.decode()


def test_the_facts_list_offers_add_with_its_scope(reviewer_client: Client) -> None:
    html = reviewer_client.get("/facts/", {"user": "alice@example.com", "agent": "coder"}).content.decode()
    assert 'href="/facts/add/?user=alice%40example.com&amp;agent=coder"' in html
    form = reviewer_client.get("/facts/add/", {"user": "alice@example.com", "agent": "coder"}).content.decode()
    assert 'value="alice@example.com"' in form and 'value="coder"' in form
