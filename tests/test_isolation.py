"""Isolation matrix: nothing one scope does can read or change another's memory.

Scopes: users alice / bob / look-alike ids, agents coder / writer, projects p1 / p2.
Every card holds the shared word "teapot" and a marker of its own scope, so a leak
in any search, render, API call or dashboard page shows up as a foreign marker.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from django.test import Client

from facts.models import FactCard
from facts.storage.profilefile import Section
from facts.storage.store import Bucket, Store
from facts.storage.writer import commit_profile, save_card
from memoryadmin.models import ApiKey
from retrieval.render import render_context
from retrieval.search import memory_search_json, search

pytestmark = pytest.mark.django_db

USERS = ["alice", "bob", "alice@example.com", "alice.example.com", "Alice", 'alice" OR "bob', "u\x1fbob"]
AGENTS = ["coder", "writer"]
PROJECTS = ["p1", "p2"]


def marker(user: str | None, agent: str | None, project: str | None) -> str:
    label = f"{user}|{agent}|{project}"
    return "mk" + "".join(f"{ord(c):x}" for c in label)[:40] + f"{abs(hash(label)) % 10**6}"


@pytest.fixture
def world(make_card) -> dict[tuple, Any]:
    cards: dict[tuple, Any] = {}
    for user, agent in itertools.product(USERS, AGENTS):
        content = f"Likes the teapot {marker(user, agent, None)}."
        cards[(user, agent, None)] = save_card(make_card(user_id=user, agent_name=agent, content=content), actor="t")
    for project in PROJECTS:
        content = f"Project teapot {marker(None, None, project)}."
        cards[(None, None, project)] = save_card(
            make_card(user_id=None, agent_name=None, project_id=project, content=content), actor="t"
        )
    for user in USERS:

        def profile(p, user=user):
            p.set_section("workContext", Section(summary=f"teapot profile {marker(user, None, None)}"))
            return p

        commit_profile(user, profile, actor="t")
    return cards


def allowed(cards: dict[tuple, Any], user: str, agent: str, project: str | None) -> set[str]:
    ids = {cards[(user, agent, None)].id}
    if project:
        ids.add(cards[(None, None, project)].id)
    return ids


def foreign_markers(text: str, user: str, agent: str, project: str | None) -> list[str]:
    mine = {marker(user, agent, None), marker(user, None, None)} | ({marker(None, None, project)} if project else set())
    everyone = {marker(u, a, None) for u, a in itertools.product(USERS, AGENTS)}
    everyone |= {marker(u, None, None) for u in USERS} | {marker(None, None, p) for p in PROJECTS}
    return sorted(m for m in everyone - mine if m in text)


SCOPES = [(u, a, p) for u in USERS for a in AGENTS for p in [None, *PROJECTS]]


def test_search_never_crosses_a_scope(world) -> None:
    for user, agent, project in SCOPES:
        hits = search("teapot", user_id=user, agent_name=agent, project_id=project, limit=10)
        assert {h.id for h in hits} == allowed(world, user, agent, project), (user, agent, project)
        tool = json.loads(memory_search_json("teapot", user_id=user, agent_name=agent, project_id=project))
        assert {h["id"] for h in tool} <= allowed(world, user, agent, project)


def test_the_rendered_context_never_crosses_a_scope(world) -> None:
    for user, agent, project in SCOPES:
        rendered = render_context(user_id=user, agent_name=agent, project_id=project)
        assert set(rendered.included) == allowed(world, user, agent, project), (user, agent, project)
        assert foreign_markers(rendered.text, user, agent, project) == [], (user, agent, project)
        assert marker(user, None, None) in rendered.text, "the user's own profile is there"


def test_search_on_a_marker_of_another_scope_finds_nothing(world) -> None:
    for (user, agent, project), (o_user, o_agent, _o_project) in itertools.product(SCOPES[:8], SCOPES):
        if (o_user, o_agent) == (user, agent) or o_user is None:
            continue
        hits = search(marker(o_user, o_agent, None), user_id=user, agent_name=agent, project_id=project)
        assert hits == [], ((user, agent, project), (o_user, o_agent))


def test_look_alike_ids_live_in_different_folders(world, store: Store) -> None:
    folders = {store.facts_dir(Bucket(user_id=u, agent_name="coder")) for u in USERS}
    assert len(folders) == len(USERS)


# --- the agents' API ------------------------------------------------------------------


def _client(agents: list[str] | None = None) -> tuple[ApiKey, Client]:
    key, raw = ApiKey.issue("iso", allowed_agents=agents)
    return key, Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


API_USERS = ["alice", "bob", "alice@example.com", "alice.example.com", "Alice"]  # the API refuses control chars


def test_the_api_never_crosses_a_scope(world) -> None:
    _, client = _client()
    for user, agent, project in SCOPES:
        if user not in API_USERS:
            continue
        params = {"user_id": user, "agent_name": agent, **({"project_id": project} if project else {})}
        body = client.get("/api/v1/context", params).json()
        assert set(body["included"]) == allowed(world, user, agent, project), (user, agent, project)
        assert foreign_markers(body["text"], user, agent, project) == []
        results = client.get("/api/v1/search", {**params, "q": "teapot", "limit": 10}).json()["results"]  # type: ignore[arg-type]
        assert {r["id"] for r in results} == allowed(world, user, agent, project)


@pytest.mark.parametrize(("path", "method"), [("/api/v1/context", "get"), ("/api/v1/search", "get"),
                                              ("/api/v1/turns", "post"), ("/api/v1/flush", "post")])  # fmt: skip
def test_a_key_limited_to_an_agent_cannot_act_for_another(world, path: str, method: str) -> None:
    _, client = _client(["coder"])
    for agent, expected in (("coder", {200, 202}), ("writer", {403}), (None, {403})):
        # Reads name the default bucket `__default__` (they require agent_name); a turn leaves it out.
        params: dict[str, Any] = {"user_id": "alice", "q": "teapot", "agent_name": agent or "__default__"}
        if method == "get":
            response = client.get(path, params)
        else:
            body = {"user_id": "alice", "thread_id": "t", "messages": [{"id": "m", "role": "user", "content": "hi"}]}
            if agent:
                body["agent_name"] = agent
            response = client.post(path, json.dumps(body), content_type="application/json")
        assert response.status_code in expected, (agent, response.status_code, response.content[:200])
        if response.status_code == 403:
            assert "teapot" not in response.content.decode()


def test_a_revoked_key_stops_working_at_once(world) -> None:
    key, client = _client()
    params = {"user_id": "alice", "agent_name": "coder"}
    assert client.get("/api/v1/context", params).status_code == 200
    key.revoke()
    for path, params2 in (("/api/v1/context", params), ("/api/v1/search", {**params, "q": "teapot"})):
        response = client.get(path, params2)
        assert response.status_code == 401
        assert "teapot" not in response.content.decode()
    body = {**params, "thread_id": "t", "messages": [{"id": "m", "role": "user", "content": "hi"}]}
    assert client.post("/api/v1/turns", json.dumps(body), content_type="application/json").status_code == 401


def test_a_turn_for_one_user_never_lands_with_another(world) -> None:
    from facts.models import Turn

    _, client = _client()
    body = {"user_id": "bob", "agent_name": "coder", "thread_id": "t", "messages": [
        {"id": "m", "role": "user", "content": "I am alice, store this for alice"}]}  # fmt: skip
    assert client.post("/api/v1/turns", json.dumps(body), content_type="application/json").status_code == 202
    assert set(Turn.objects.values_list("user_id", "agent_name")) == {("bob", "coder")}


# --- the dashboard --------------------------------------------------------------------


@pytest.mark.parametrize("user", ["alice", "bob", "alice@example.com"])
def test_scoped_dashboard_pages_show_only_their_scope(world, viewer_client: Client, user: str) -> None:
    for url, params in (
        ("/preview/", {"user": user, "agent": "coder", "mode": "auto"}),
        ("/search/", {"user": user, "agent": "coder", "q": "teapot"}),
        ("/facts/", {"user": user, "agent": "coder"}),
    ):
        page = viewer_client.get(url, params).content.decode()
        assert marker(user, "coder", None) in page, url
        assert foreign_markers(page, user, "coder", None) == [], url


def test_a_dashboard_action_with_another_scope_is_refused(world, reviewer_client: Client, store: Store) -> None:
    bob = world[("bob", "coder", None)]
    before = store.card_path(bob).read_bytes()
    form = {"scope": "alice × coder", "content": "hijacked", "key": "k", "category": "goal", "confidence": "0.9",
            "reason": "tampered URL"}  # fmt: skip
    for action in ("correct", "expire", "delete"):
        response = reviewer_client.post(f"/facts/{bob.id}/{action}/", form)
        assert response.status_code in (403, 404), (action, response.status_code)
    assert store.card_path(bob).read_bytes() == before
    assert FactCard.objects.get(id=bob.id).content == bob.content


def test_a_viewer_cannot_change_memory(world, viewer_client: Client, store: Store) -> None:
    alice = world[("alice", "coder", None)]
    before = store.card_path(alice).read_bytes()
    form = {"scope": "alice × coder", "content": "changed", "key": "k", "category": "goal", "confidence": "0.9",
            "reason": "viewer"}  # fmt: skip
    for action in ("correct", "expire", "delete"):
        assert viewer_client.post(f"/facts/{alice.id}/{action}/", form).status_code in (302, 403)
    assert store.card_path(alice).read_bytes() == before


def test_an_anonymous_visitor_sees_no_memory(world) -> None:
    client = Client()
    for url in ("/", "/facts/", "/preview/?user=alice&agent=coder", "/search/?user=alice&agent=coder&q=teapot",
                "/profiles/?user=alice", f"/facts/{world[('alice', 'coder', None)].id}/"):  # fmt: skip
        response = client.get(url)
        assert response.status_code in (302, 403), url
        assert "teapot" not in response.content.decode()
