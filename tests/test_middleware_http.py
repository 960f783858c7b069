"""The HTTP client and the in-process memory give the same results, alone and under an agent."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage

from facts.models import FactUsage
from facts.storage.profilefile import Section
from facts.storage.writer import commit_profile, save_card
from memoryadmin.client import LocalMemory, MemoryClient
from memoryadmin.langchain_memory import LongTermMemoryMiddleware
from memoryadmin.memory_protocol import MemoryContext, MemoryRejected
from memoryadmin.models import ApiKey
from tests.test_middleware_fakes import DjangoTransport, ScriptedChatModel

pytestmark = [pytest.mark.django_db, pytest.mark.urls("memoryadmin.api_root_urls")]

ALICE = MemoryContext(user_id="alice", agent_name="coder", thread_id="t1")


@pytest.fixture(autouse=True)
def _inline_usage(settings: Any) -> None:
    settings.API_USAGE_FLUSH_SECONDS = 0


@pytest.fixture
def seeded(make_card: Any) -> list[str]:
    def profile(p: Any) -> Any:
        p.set_section("workContext", Section(summary="用户主要从事 Python 后端开发。"))
        return p

    commit_profile("alice", profile, actor="test")
    cards = [
        save_card(make_card(content="用户偏好用中文解释技术问题。", confidence=0.9), actor="t"),
        save_card(make_card(content="用户希望先看结论，再看必要解释。", category="correction"), actor="t"),
        save_card(make_card(content="User prefers pytest over unittest.", confidence=0.8), actor="t"),
        save_card(make_card(user_id="bob", content="用户偏好用中文写注释。"), actor="t"),
    ]
    return [c.id for c in cards]


@pytest.fixture
def client() -> MemoryClient:
    _, raw = ApiKey.issue("parity")
    return MemoryClient("http://testserver", raw, transport=DjangoTransport())


def test_context_is_the_same_through_http_and_in_process(seeded: list[str], client: MemoryClient) -> None:
    local = LocalMemory()
    for mode in ("auto", "tool"):
        assert client.context(ALICE, mode=mode) == local.context(ALICE, mode=mode)
    auto = local.context(ALICE, mode="auto")
    assert "用户主要从事 Python 后端开发" in auto["text"]
    assert set(seeded[:3]) <= set(auto["included"])
    assert seeded[3] not in auto["included"]


def test_search_is_the_same_through_http_and_in_process(seeded: list[str], client: MemoryClient) -> None:
    local = LocalMemory()
    for query in ("中文", "pytest", "结论", "nothing-matches-this"):
        assert client.search(ALICE, query, limit=5) == local.search(ALICE, query, limit=5)
    assert [r["id"] for r in local.search(ALICE, "中文")] == [seeded[0]]


def test_both_paths_count_usage_the_same_way(seeded: list[str], client: MemoryClient) -> None:
    client.context(ALICE)
    after_http = FactUsage.objects.get(fact_id=seeded[0]).injected_count
    LocalMemory().context(ALICE)
    assert FactUsage.objects.get(fact_id=seeded[0]).injected_count == after_http + 1 == 2


def test_turns_are_recorded_the_same_way(client: MemoryClient) -> None:
    local = LocalMemory()
    messages = [{"id": "m1", "role": "user", "content": "我主要做 Python 后端开发。"}]
    via_http = client.record_turn(MemoryContext("alice", "coder", None, "t-http"), messages)
    in_process = local.record_turn(MemoryContext("alice", "coder", None, "t-local"), messages)
    assert via_http["accepted"] == in_process["accepted"] == 1
    # Seen ids are skipped on both paths.
    assert client.record_turn(MemoryContext("alice", "coder", None, "t-local"), messages)["accepted"] == 0
    assert local.record_turn(MemoryContext("alice", "coder", None, "t-http"), messages)["accepted"] == 0


def test_both_paths_refuse_bad_input_as_permanent(client: MemoryClient) -> None:
    bad = MemoryContext("a/b", "coder", None, "t")
    with pytest.raises(MemoryRejected):
        client.record_turn(bad, [{"id": "m1", "role": "user", "content": "x"}])
    with pytest.raises(MemoryRejected):
        LocalMemory().record_turn(bad, [{"id": "m1", "role": "user", "content": "x"}])


def test_an_agent_sees_the_same_prompt_through_either_path(seeded: list[str], client: MemoryClient) -> None:
    prompts = []
    for memory in (LocalMemory(), client):
        model = ScriptedChatModel()
        agent = create_agent(model, middleware=[LongTermMemoryMiddleware(memory)], context_schema=MemoryContext)
        agent.invoke({"messages": [HumanMessage(content="讲讲数据库事务。", id="q1")]}, context=ALICE)
        prompts.append([(m.type, m.content, m.additional_kwargs) for m in model.prompts[0]])
    assert prompts[0] == prompts[1]
    assert prompts[0][0][2] == {"origin": "memory", "hide_from_ui": True}


def test_a_revoked_key_is_a_permanent_refusal(client: MemoryClient) -> None:
    ApiKey.objects.update(revoked_at="2026-01-01T00:00:00Z")
    with pytest.raises(MemoryRejected):
        client.context(ALICE)


@pytest.mark.django_db(transaction=True)
def test_the_client_works_against_a_live_server(live_server: Any, make_card: Any, settings: Any) -> None:
    settings.ROOT_URLCONF = "memoryadmin.api_root_urls"
    card = save_card(make_card(content="用户偏好用中文解释技术问题。"), actor="t")
    _, raw = ApiKey.issue("live")
    client = MemoryClient(live_server.url, raw)
    try:
        assert client.context(ALICE) == LocalMemory().context(ALICE)
        assert [r["id"] for r in client.search(ALICE, "中文")] == [card.id]
        receipt = client.record_turn(ALICE, [{"id": "m1", "role": "user", "content": "我主要做 Python 后端开发。"}])
        assert receipt["accepted"] == 1
    finally:
        client.close()
