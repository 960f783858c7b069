"""`/context` and `/search` name their agent, and say when nothing knows it (issue 34):
a forgotten or misspelt agent_name used to read as an agent with no memory, 200."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from django.test import Client

from facts.storage.writer import save_card
from memoryadmin import api_service
from memoryadmin.client import MemoryClient
from memoryadmin.memory_protocol import MemoryContext
from memoryadmin.models import ApiKey
from retrieval.models import AgentSettings

pytestmark = [pytest.mark.django_db, pytest.mark.urls("memoryadmin.api_root_urls")]


@pytest.fixture(autouse=True)
def _no_agent_remembered() -> None:
    """Known agents are remembered for a while per process: not from another test."""
    api_service._known_agents.clear()


@pytest.fixture
def agent(settings: Any) -> Client:
    settings.API_USAGE_FLUSH_SECONDS = 0
    return Client(HTTP_AUTHORIZATION=f"Bearer {ApiKey.issue('test agent')[1]}")


def _turn(client: Client, agent_name: str | None) -> None:
    body = {
        "user_id": "alice",
        "thread_id": "t1",
        "messages": [{"id": "m1", "role": "user", "content": "I prefer answers in English, please."}],
    }
    if agent_name is not None:
        body["agent_name"] = agent_name
    answer = client.post("/api/v1/turns", data=json.dumps(body), content_type="application/json")
    assert answer.status_code == 202, answer.content


@pytest.mark.parametrize("path", ["/api/v1/context", "/api/v1/search"])
def test_it_requires_agent_name_naming_the_field(agent: Client, path: str) -> None:
    for blank in ({}, {"agent_name": ""}, {"agent_name": "  "}):
        answer = agent.get(path, {"user_id": "alice", "q": "english", **blank})
        assert answer.status_code == 400
        assert answer.json()["error"] == {
            "code": "missing_field",
            "message": "agent_name: is required (`__default__` reads the turns sent without one)",
        }


@pytest.mark.parametrize("path", ["/api/v1/context", "/api/v1/search"])
def test_it_says_an_agent_nothing_knows_is_unknown(agent: Client, path: str) -> None:
    _turn(agent, "coder")
    answer = agent.get(path, {"user_id": "alice", "agent_name": "codr", "q": "english"})
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert error["code"] == "unknown_agent"
    assert error["message"].startswith("agent_name: no agent 'codr' is known")


def test_a_new_agent_is_known_from_its_first_turn_and_a_new_user_of_a_known_one_at_once(agent: Client) -> None:
    assert agent.get("/api/v1/context", {"user_id": "alice", "agent_name": "writer"}).status_code == 404
    _turn(agent, "writer")
    assert agent.get("/api/v1/context", {"user_id": "alice", "agent_name": "writer"}).status_code == 200
    fresh = agent.get("/api/v1/context", {"user_id": "someone-new", "agent_name": "writer"})
    assert fresh.status_code == 200 and fresh.json()["included"] == []


def test_settings_cards_and_the_key_make_an_agent_known(agent: Client, make_card: Any) -> None:
    AgentSettings.objects.create(agent_name="planner")
    save_card(make_card(agent_name="reader"), actor="t")
    limited = Client(HTTP_AUTHORIZATION=f"Bearer {ApiKey.issue('limited', allowed_agents=['scout'])[1]}")
    for client, name in ((agent, "planner"), (agent, "reader"), (limited, "scout")):
        assert client.get("/api/v1/context", {"user_id": "bob", "agent_name": name}).status_code == 200, name


def test_the_default_bucket_is_read_by_its_name(agent: Client) -> None:
    _turn(agent, None)  # a turn without an agent goes to __default__
    answer = agent.get("/api/v1/context", {"user_id": "alice", "agent_name": "__default__"})
    assert answer.status_code == 200


@pytest.mark.django_db(transaction=True)
def test_the_http_client_reads_an_unknown_agent_as_no_memory_yet(live_server: Any) -> None:
    """What the LangChain middleware meets on a new agent's first model call, before its
    first turn: an empty block, and the turn then goes through."""
    raw = ApiKey.issue("middleware")[1]
    client = MemoryClient(live_server.url, raw, deliver_queued_on_start=False)
    try:
        ctx = MemoryContext(user_id="alice", agent_name="brand-new", thread_id="t1")
        assert client.context(ctx) == {"text": "", "tokens": 0, "included": [], "excluded": []}
        assert client.search(ctx, "english") == []
        client.record_turn(ctx, [{"id": "m1", "role": "user", "content": "I prefer answers in English."}])
        assert "included" in client.context(ctx)
        missing = httpx.get(
            live_server.url + "/api/v1/context", params={"user_id": "alice"}, headers={"Authorization": f"Bearer {raw}"}
        )
        assert missing.status_code == 400
    finally:
        client.close()
