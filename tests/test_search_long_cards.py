"""A card longer than the search tool's token cap is cut to fit, never an empty answer.

The tool's JSON is built in one place (`retrieval.search.memory_search_json`); the API's
`/search`, the middleware's `memory_search` tool and `manage.py memory_search --json`
all serve it, so each door is checked here.
"""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from facts.storage.writer import save_card
from memoryadmin.client import LocalMemory
from memoryadmin.langchain_memory import LongTermMemoryMiddleware
from memoryadmin.memory_protocol import MemoryContext
from memoryadmin.models import ApiKey
from retrieval.search import memory_search_json
from retrieval.tokens import count_tokens
from tests.test_middleware_fakes import ScriptedChatModel

pytestmark = pytest.mark.django_db

LONG = "User explained the caching layer in detail: " + "the cache key includes the tenant and the locale, " * 300
LONG_ZH = "用户详细说明了缓存层的设计：" + "缓存键包含租户和语言，过期时间按业务设置，" * 300


def _tool(query: str = "caching", **kw: Any) -> tuple[str, list[dict[str, Any]]]:
    text = memory_search_json(query, user_id="alice", agent_name="coder", **kw)
    return text, json.loads(text)


@pytest.mark.parametrize("content", [LONG, LONG_ZH], ids=["latin", "chinese"])
def test_it_cuts_a_top_hit_longer_than_the_cap_instead_of_answering_nothing(make_card, content: str) -> None:
    card = save_card(make_card(content=content), actor="t")
    assert count_tokens(content) > 900
    text, results = _tool("caching" if content is LONG else "缓存")
    assert [r["id"] for r in results] == [card.id]
    assert results[0]["truncated"] is True
    assert results[0]["content"].endswith("…")
    assert content.startswith(results[0]["content"][:-1])
    assert count_tokens(text) <= 900
    # Cut close to the cap, not to a stub: the agent gets as much of the card as fits.
    assert count_tokens(text) > 850


def test_short_results_are_whole_and_carry_no_truncated_field(make_card) -> None:
    save_card(make_card(content="User prefers caching with Redis."), actor="t")
    _, results = _tool()
    assert len(results) == 1 and "truncated" not in results[0]


def test_a_long_card_behind_short_ones_is_dropped_whole_and_the_short_ones_stay(make_card, settings) -> None:
    settings.MEMORY_SEARCH_TOKEN_CAP = 200
    short = save_card(make_card(content="caching caching caching: Redis.", confidence=1.0), actor="t")
    save_card(make_card(content=LONG, confidence=0.1), actor="t")
    # Redis is only in the short card: it ranks first (a tf-saturated "cache" × 300 would
    # otherwise match as well as the short card's three).
    _, results = _tool("Redis caching")
    assert [r["id"] for r in results] == [short.id]
    assert "truncated" not in results[0]


def test_even_an_absurdly_small_cap_leaves_the_top_hit_named(make_card, settings) -> None:
    settings.MEMORY_SEARCH_TOKEN_CAP = 5
    card = save_card(make_card(content=LONG), actor="t")
    _, results = _tool()
    assert [r["id"] for r in results] == [card.id]
    assert results[0]["truncated"] is True and results[0]["content"] == "…"


def test_the_api_search_returns_the_cut_card(make_card) -> None:
    card = save_card(make_card(content=LONG), actor="t")
    _, raw = ApiKey.issue("agent")
    response = Client(HTTP_AUTHORIZATION=f"Bearer {raw}").get(
        "/api/v1/search", {"user_id": "alice", "agent_name": "coder", "q": "caching"}
    )
    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["id"] for r in results] == [card.id] and results[0]["truncated"] is True


# The agent runs its tool in a worker thread: no test transaction may hold the database.
@pytest.mark.django_db(transaction=True)
def test_the_agents_memory_search_tool_returns_the_cut_card(make_card) -> None:
    card = save_card(make_card(content=LONG), actor="t")
    call = AIMessage(content="", tool_calls=[{"name": "memory_search", "args": {"query": "caching"}, "id": "c1"}])
    model = ScriptedChatModel(script=[call, "done"])
    agent = create_agent(
        model, middleware=[LongTermMemoryMiddleware(LocalMemory(), mode="tool")], context_schema=MemoryContext
    )
    state = agent.invoke(
        {"messages": [HumanMessage(content="how is caching done?", id="q1")]},
        context=MemoryContext(user_id="alice", agent_name="coder", thread_id="t1"),
    )
    answer = next(m for m in state["messages"] if isinstance(m, ToolMessage))
    results = json.loads(answer.content)
    assert [r["id"] for r in results] == [card.id] and results[0]["truncated"] is True


def test_the_management_command_prints_the_cut_card(make_card) -> None:
    card = save_card(make_card(content=LONG), actor="t")
    out = StringIO()
    call_command("memory_search", "--user", "alice", "--agent", "coder", "--json", "caching", stdout=out)
    results = json.loads(out.getvalue())
    assert [r["id"] for r in results] == [card.id] and results[0]["truncated"] is True
