"""The MCP server (issue 20), in-process: the SDK's own client against the server object,
and against Django itself (ASGI handler → the /mcp view → the SDK app through a2wsgi).

The SDK runs tools in worker threads, so these tests commit (transactional_db).
The live server and the stdio subprocess are in test_mcp_live.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
import pytest
from django.core.asgi import get_asgi_application
from django.test import Client as DjangoClient
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from facts.enums import CardStatus
from facts.models import AuditEvent, Candidate, FactCard, Turn
from facts.storage.store import Bucket, Store
from facts.storage.writer import save_card
from memoryadmin.mcp_server import Identity, build_server
from memoryadmin.models import ApiKey
from tests.factories import fact_candidate
from tests.openai_stub import OpenAIStub

pytestmark = pytest.mark.django_db(transaction=True)

ALICE = Identity(user_id="alice", agent_name="coder", project_id=None, actor="key:test")
TOOLS = {"memory_search", "memory_context", "memory_list", "memory_remember", "memory_forget"}


@pytest.fixture(autouse=True)
def _rules_by_default(settings: Any) -> None:
    settings.MEMORY_LLM_BASE_URL = ""
    settings.MEMORY_EXTRACTOR = ""


def run(client: Client, steps: Callable[[Client], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with client:
            return await steps(client)

    return asyncio.run(main())


def in_process(identity: Identity = ALICE) -> Client:
    return Client(build_server(lambda ctx: identity))


def call(client: Client, name: str, args: dict[str, Any] | None = None) -> Any:
    return run(client, lambda c: c.call_tool(name, args or {}))


def card(make_card: Callable[..., Any], **overrides: Any) -> Any:
    return save_card(make_card(**overrides), actor="test")


@pytest.fixture
def cards(make_card: Callable[..., Any]) -> dict[str, Any]:
    return {
        "alice": card(make_card, key="editor", content="User edits code in vim with a dark theme."),
        "alice_goal": card(make_card, key="goal", category="goal", content="User is learning Rust this winter."),
        "bob": card(make_card, user_id="bob", key="editor", content="User edits code in vim, bob's way."),
        "other_agent": card(make_card, agent_name="writer", key="style", content="User writes vim tutorials."),
    }


# --- the tools ---------------------------------------------------------------------


def test_it_offers_five_tools_with_argument_and_result_schemas() -> None:
    tools = run(in_process(), lambda c: c.list_tools()).tools
    assert {tool.name for tool in tools} == TOOLS
    by_name = {tool.name: tool for tool in tools}
    assert by_name["memory_search"].input_schema["required"] == ["query"]
    assert by_name["memory_search"].input_schema["properties"]["limit"]["maximum"] == 10
    assert by_name["memory_forget"].input_schema["required"] == ["fact_id", "reason"]
    assert "user_id" not in json.dumps([tool.input_schema for tool in tools])
    assert all(tool.output_schema for tool in tools)
    assert by_name["memory_search"].annotations.read_only_hint is True
    assert by_name["memory_forget"].annotations.destructive_hint is True


def test_search_list_and_context_show_only_the_sessions_user_and_agent(cards: dict[str, Any]) -> None:
    async def steps(c: Client) -> list[Any]:
        return [
            await c.call_tool("memory_search", {"query": "vim"}),
            await c.call_tool("memory_list", {}),
            await c.call_tool("memory_list", {"category": "goal"}),
            await c.call_tool("memory_context", {}),
        ]

    search, listed, goals, context = run(in_process(), steps)
    assert [hit["id"] for hit in search.structured_content["results"]] == [cards["alice"].id]
    assert {fact["id"] for fact in listed.structured_content["facts"]} == {cards["alice"].id, cards["alice_goal"].id}
    assert [fact["key"] for fact in goals.structured_content["facts"]] == ["goal"]
    assert "dark theme" in context.structured_content["text"]
    assert "bob's way" not in context.structured_content["text"]
    assert set(context.structured_content["included"]) == {cards["alice"].id, cards["alice_goal"].id}


def test_a_tool_argument_cannot_name_another_user(cards: dict[str, Any]) -> None:
    result = call(in_process(), "memory_search", {"query": "vim", "user_id": "bob", "agent_name": "writer"})
    assert [hit["id"] for hit in result.structured_content["results"]] == [cards["alice"].id]


def test_forget_expires_the_fact_keeps_it_and_audits_the_key(cards: dict[str, Any], store: Store) -> None:
    fact = cards["alice"]

    async def steps(c: Client) -> list[Any]:
        return [
            await c.call_tool("memory_forget", {"fact_id": fact.id, "reason": "switched to emacs"}),
            await c.call_tool("memory_list", {}),
            await c.call_tool("memory_search", {"query": "vim"}),
        ]

    forgot, listed, search = run(in_process(), steps)
    assert not forgot.is_error and forgot.structured_content["status"] == "expired"
    assert fact.id not in {f["id"] for f in listed.structured_content["facts"]}
    assert search.structured_content["results"] == []
    on_disk = store.read_card(Bucket(user_id="alice", agent_name="coder"), fact.id)
    assert on_disk is not None and on_disk.status == CardStatus.EXPIRED
    event = AuditEvent.objects.get(action="expire", target=fact.id)
    assert (event.actor, event.reason, event.user_id) == ("key:test", "switched to emacs", "alice")


@pytest.mark.parametrize("who", ["bob", "other_agent", "unknown", "malformed"])
def test_forget_refuses_a_fact_outside_the_session_and_changes_nothing(cards: dict[str, Any], who: str) -> None:
    fact_id = {"unknown": "fact_000000000000", "malformed": "../../etc/passwd"}.get(who) or cards[who].id
    result = call(in_process(), "memory_forget", {"fact_id": fact_id, "reason": "not mine"})
    assert result.is_error
    assert "unknown fact" in result.content[0].text and "bob" not in result.content[0].text
    assert set(FactCard.objects.values_list("status", flat=True)) == {"active"}
    assert not AuditEvent.objects.filter(action="expire").exists()


def test_forgetting_twice_says_it_is_already_expired(cards: dict[str, Any]) -> None:
    args = {"fact_id": cards["alice"].id, "reason": "outdated"}

    async def steps(c: Client) -> list[Any]:
        return [await c.call_tool("memory_forget", args), await c.call_tool("memory_forget", args)]

    first, second = run(in_process(), steps)
    assert not first.is_error and second.is_error and "already expired" in second.content[0].text


@pytest.mark.parametrize(
    ("name", "args", "field"),
    [
        ("memory_search", {}, "query"),
        ("memory_search", {"query": "vim", "limit": 0}, "limit"),
        ("memory_search", {"query": "vim", "limit": 11}, "limit"),
        ("memory_list", {"category": "secrets"}, "category"),
        ("memory_context", {"mode": "everything"}, "mode"),
        ("memory_remember", {"text": ""}, "text"),
        ("memory_forget", {"fact_id": "fact_000000000000"}, "reason"),
    ],
)
def test_bad_arguments_are_tool_errors_naming_the_field(name: str, args: dict[str, Any], field: str) -> None:
    result = call(in_process(), name, args)
    assert result.is_error and field in result.content[0].text
    assert not Turn.objects.exists()


def test_project_facts_are_listed_only_with_that_project(make_card: Callable[..., Any]) -> None:
    shared = card(
        make_card, user_id=None, agent_name=None, project_id="apollo", content="The project deploys on Fridays."
    )
    with_project = Identity(user_id="alice", agent_name="coder", project_id="apollo", actor="key:test")
    listed = call(in_process(with_project), "memory_list", {}).structured_content["facts"]
    assert [(f["id"], f["scope"]) for f in listed] == [(shared.id, "project")]
    assert call(in_process(), "memory_list", {}).structured_content["facts"] == []
    refused = call(in_process(with_project), "memory_forget", {"fact_id": shared.id, "reason": "x"})
    assert refused.is_error


def test_an_unknown_agent_is_a_tool_error_not_an_empty_memory(cards: dict[str, Any]) -> None:
    typo = Identity(user_id="alice", agent_name="codr", project_id=None, actor="key:test")
    for tool, args in (("memory_search", {"query": "vim"}), ("memory_context", {})):
        result = call(in_process(typo), tool, args)
        assert result.is_error and "no agent 'codr' is known" in result.content[0].text
    # An agent the caller's key is limited to is known before its first turn.
    limited = Identity(user_id="alice", agent_name="codr", project_id=None, actor="key:test", key_agents=("codr",))
    assert not call(in_process(limited), "memory_context", {}).is_error
    assert not call(in_process(), "memory_search", {"query": "vim"}).is_error


# --- remember: the gate decides --------------------------------------------------------


def test_remember_goes_through_the_rule_extractor_and_the_gate() -> None:
    async def steps(c: Client) -> list[Any]:
        return [
            await c.call_tool("memory_remember", {"text": "I prefer answers in English, please."}),
            await c.call_tool("memory_remember", {"text": "ok thanks"}),
            await c.call_tool("memory_list", {}),
        ]

    kept, greeting, listed = run(in_process(), steps)
    result = kept.structured_content
    assert result["status"] == "done" and result["turn_id"] == Turn.objects.order_by("pk").first().pk
    [verdict] = result["verdicts"]
    assert verdict["verdict"] == "accepted" and verdict["reasons"] == [] and verdict["fact_id"]
    assert [f["id"] for f in listed.structured_content["facts"]] == [verdict["fact_id"]]
    turn = Turn.objects.get(pk=result["turn_id"])
    assert (turn.user_id, turn.agent_name, turn.message_ids) == ("alice", "coder", ["m1"])
    assert turn.messages[0]["type"] == "human"
    assert turn.messages[0]["data"]["content"] == "I prefer answers in English, please."
    assert greeting.structured_content["verdicts"] == [] and greeting.structured_content["status"] in (
        "done",
        "skipped",
    )


def test_remember_with_a_model_keeps_only_what_passes_the_gate(openai_stub: OpenAIStub, settings: Any) -> None:
    settings.MEMORY_EXTRACTOR = "llm"
    text = "我主要做 Python 后端开发，平时请用中文解释技术问题。这周先帮我修一下登录的 bug。"
    openai_stub.reply_tool_call(
        {
            "facts": [
                fact_candidate(evidence_message_id="m1"),
                fact_candidate(
                    key="todo", content="修登录 bug", durability="temporary", evidence_message_id="m1",
                    evidence_text="这周先帮我修一下登录的 bug",
                ),
                fact_candidate(key="made_up", content="用户喜欢 Java", evidence_message_id="m1", evidence_text="我喜欢 Java"),
            ],
            "summaries": [],
            "confirmations": [],
        }
    )  # fmt: skip
    result = call(in_process(), "memory_remember", {"text": text}).structured_content
    verdicts = {v["key"]: (v["verdict"], v["reasons"]) for v in result["verdicts"]}
    assert verdicts == {
        "response_language": ("accepted", []),
        "todo": ("rejected", ["temporary"]),
        "made_up": ("rejected", ["evidence_missing"]),
    }
    sent = json.loads(openai_stub.requests[0]["messages"][1]["content"])["conversation"]
    assert sent == [{"id": "m1", "role": "user", "content": text}]
    assert list(FactCard.objects.values_list("key", flat=True)) == ["response_language"]
    # the rejected ones wait in the review queue like any other
    assert Candidate.objects.filter(verdict="rejected", review_state="pending").count() == 2


def test_remember_answers_pending_when_no_worker_has_judged_it_yet(settings: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    settings.MCP_REMEMBER_WAIT_SECONDS = 0.3
    result = call(in_process(), "memory_remember", {"text": "I prefer tabs over spaces."}).structured_content
    assert result["status"] == "pending" and result["verdicts"] == []
    assert Turn.objects.get(pk=result["turn_id"]).flush is True
    assert not FactCard.objects.exists()


# --- over HTTP through Django -------------------------------------------------------


@pytest.fixture
def keys(db: None) -> dict[str, str]:
    return {
        "any": ApiKey.issue("any")[1],
        "coder": ApiKey.issue("coder only", allowed_agents=["coder"])[1],
        "acme": ApiKey.issue("acme", allowed_users=["acme:*"])[1],
    }


def over_django(key: str | None, user: str | None = "alice", agent: str | None = "coder") -> Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if user:
        headers["X-Memory-User"] = user
    if agent:
        headers["X-Memory-Agent"] = agent
    http = httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=get_asgi_application()),  # type: ignore[arg-type]
        base_url="http://testserver",
        headers=headers,
    )
    return Client(streamable_http_client("http://testserver/mcp", http_client=http))


def test_every_tool_works_over_http_through_django(keys: dict[str, str], cards: dict[str, Any]) -> None:
    async def steps(c: Client) -> dict[str, Any]:
        return {
            "tools": await c.list_tools(),
            "search": await c.call_tool("memory_search", {"query": "vim", "limit": 3}),
            "context": await c.call_tool("memory_context", {"mode": "auto"}),
            "list": await c.call_tool("memory_list", {}),
            "remember": await c.call_tool("memory_remember", {"text": "I prefer answers in English, please."}),
            "forget": await c.call_tool("memory_forget", {"fact_id": cards["alice"].id, "reason": "wrong"}),
        }

    done = run(over_django(keys["coder"]), steps)
    assert {tool.name for tool in done["tools"].tools} == TOOLS
    assert [hit["id"] for hit in done["search"].structured_content["results"]] == [cards["alice"].id]
    assert "dark theme" in done["context"].structured_content["text"]
    assert len(done["list"].structured_content["facts"]) == 2
    assert done["remember"].structured_content["verdicts"][0]["verdict"] == "accepted"
    assert done["forget"].structured_content["status"] == "expired"
    assert AuditEvent.objects.get(action="expire").actor == "key:coder only"


@pytest.mark.parametrize(
    ("key", "user", "agent", "message"),
    [
        (None, "alice", "coder", "send an API key"),
        ("mem_wrong", "alice", "coder", "unknown API key"),
        ("coder", "alice", "writer", "may not act for the agent 'writer'"),
        ("acme", "alice", "coder", "may not act for the user 'alice'"),
        ("any", None, "coder", "X-Memory-User: is required"),
        ("any", "../bob", "coder", "X-Memory-User"),
    ],
)
def test_the_sdk_client_is_refused_with_a_clear_message(
    keys: dict[str, str], key: str | None, user: str | None, agent: str, message: str
) -> None:
    with pytest.raises(Exception) as caught:  # the SDK raises it inside its task groups
        run(over_django(keys.get(key or "", key), user, agent), lambda c: c.list_tools())
    errors = [caught.value]
    while hasattr(errors[-1], "exceptions"):
        errors.append(errors[-1].exceptions[0])
    assert isinstance(errors[-1], MCPError) and message in str(errors[-1])


def test_a_tenant_key_reaches_its_users_and_only_theirs(keys: dict[str, str], make_card: Callable[..., Any]) -> None:
    mine = card(make_card, user_id="acme:ann", content="User edits code in vim at acme.")
    found = run(over_django(keys["acme"], "acme:ann"), lambda c: c.call_tool("memory_search", {"query": "vim"}))
    assert [hit["id"] for hit in found.structured_content["results"]] == [mine.id]


INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def post(key: str | None, body: Any = INITIALIZE, **headers: str) -> Any:
    extra: dict[str, Any] = {"HTTP_AUTHORIZATION": f"Bearer {key}"} if key else {}
    extra |= {"HTTP_X_MEMORY_USER": "alice", "HTTP_X_MEMORY_AGENT": "coder"}
    extra |= {f"HTTP_{name.upper()}": value for name, value in headers.items()}
    return DjangoClient().post(
        "/mcp", json.dumps(body), content_type="application/json", HTTP_ACCEPT="application/json, text/event-stream",
        **extra,
    )  # fmt: skip


def test_the_endpoint_answers_auth_failures_with_status_and_json_rpc_errors(keys: dict[str, str]) -> None:
    assert post(keys["any"]).status_code == 200
    for key, status, code in [(None, 401, "unauthenticated"), ("mem_nope", 401, "invalid_key")]:
        response = post(key)
        assert response.status_code == status and response["WWW-Authenticate"] == 'Bearer realm="memory"'
        assert response.json()["error"]["data"]["code"] == code
    ApiKey.objects.filter(name="any").update(revoked_at="2026-01-01T00:00:00Z")
    assert post(keys["any"]).json()["error"]["data"]["code"] == "key_revoked"


def test_failed_keys_from_one_address_are_throttled(keys: dict[str, str], settings: Any) -> None:
    settings.API_AUTH_FAILURE_LIMIT = 2
    assert [post("mem_nope").status_code for _ in range(3)] == [401, 401, 429]
    assert post(keys["any"]).status_code == 200  # a real key still passes


def test_the_keys_rate_limit_covers_mcp_requests(keys: dict[str, str]) -> None:
    ApiKey.objects.filter(name="any").update(rate_limit_per_minute=2)
    responses = [post(keys["any"]) for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert responses[2].json()["error"]["data"]["code"] == "rate_limited" and int(responses[2]["Retry-After"]) >= 1


def test_an_oversized_body_is_refused_before_the_sdk_reads_it(keys: dict[str, str], settings: Any) -> None:
    settings.API_MAX_BODY_BYTES = 1000
    big = dict(INITIALIZE, params=dict(INITIALIZE["params"], padding="x" * 2000))
    response = post(keys["any"], big)
    assert response.status_code == 413 and response.json()["error"]["data"]["code"] == "too_large"


def test_the_endpoint_is_not_behind_the_dashboard_login_or_csrf(keys: dict[str, str]) -> None:
    response = post(keys["any"])
    body = response.json()
    assert response.status_code == 200 and body["result"]["serverInfo"]["name"] == "memory"


@pytest.mark.parametrize("method", ["get", "delete", "put"])
def test_only_post_is_served_so_no_stream_holds_a_thread(keys: dict[str, str], method: str) -> None:
    headers = {
        "HTTP_AUTHORIZATION": f"Bearer {keys['any']}",
        "HTTP_X_MEMORY_USER": "alice",
        "HTTP_ACCEPT": "text/event-stream",
    }
    response = getattr(DjangoClient(), method)("/mcp", **headers)
    assert response.status_code == 405 and response["Allow"] == "POST"
    assert response.json()["error"]["data"]["code"] == "method_not_allowed"
