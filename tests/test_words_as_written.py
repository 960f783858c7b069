"""Issue 35: the agent sees the words as written. A fact holding code, `&`, `<` or HTML
reaches the agent the same through the context block, /search, MCP, the LangChain
middleware and its memory_search tool; the dashboard escapes it once, for HTML."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from django.test import Client

from facts.storage.writer import save_card
from memoryadmin.client import LocalMemory, MemoryClient
from memoryadmin.langchain_memory import make_memory_search_tool
from memoryadmin.mcp_server import Identity, build_server
from memoryadmin.memory_protocol import MemoryContext
from memoryadmin.models import ApiKey
from tests.test_middleware import agent_with, is_memory, run
from tests.test_middleware_fakes import DjangoTransport, ScriptedChatModel

RUST = "User prefers Result<T, E> & the ? operator over panics in Rust."
RND = "User works in R&D at a lab."
HTML = "User writes <b>bold</b> headings & <em>notes</em> in HTML."
WORDS = (RUST, RND, HTML)
ALICE = MemoryContext(user_id="alice", agent_name="coder", thread_id="t1")


@pytest.fixture
def facts(make_card: Any) -> dict[str, str]:
    cards = {text: save_card(make_card(key=f"k{i}", content=text), actor="t") for i, text in enumerate(WORDS)}
    return {card.id: text for text, card in cards.items()}


def _line(text: str) -> str:
    return f"- [preference] {text}\n"


@pytest.mark.django_db
def test_the_api_gives_the_same_words_in_the_context_and_in_search(facts: dict[str, str]) -> None:
    _key, secret = ApiKey.issue("t")
    agent = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    context = agent.get("/api/v1/context", {"user_id": "alice", "agent_name": "coder"}).json()
    for text in WORDS:
        assert _line(text) in context["text"]
    assert "&lt;" not in context["text"] and "&amp;" not in context["text"]
    for query, text in (("Rust operator", RUST), ("R&D lab", RND), ("bold headings", HTML)):
        results = agent.get("/api/v1/search", {"user_id": "alice", "agent_name": "coder", "q": query}).json()
        assert results["results"][0]["content"] == text


@pytest.mark.django_db
def test_the_middleware_injects_and_finds_the_same_words(facts: dict[str, str]) -> None:
    memory, model = LocalMemory(), ScriptedChatModel()
    run(agent_with(memory, model), "How should I handle errors?")
    injected = model.prompts[0][0]
    assert is_memory(injected)
    for text in WORDS:
        assert _line(text) in injected.content
    found = json.loads(make_memory_search_tool(memory).func("Rust operator", runtime=_runtime()))
    assert found[0]["content"] == RUST


@pytest.mark.django_db
def test_the_http_client_gets_the_same_words(facts: dict[str, str]) -> None:
    _key, secret = ApiKey.issue("t")
    client = MemoryClient("http://testserver", secret, transport=DjangoTransport(), deliver_queued_on_start=False)
    try:
        assert _line(RUST) in client.context(ALICE)["text"]
        assert client.search(ALICE, "R&D lab")[0]["content"] == RND
    finally:
        client.close()


@pytest.mark.django_db(transaction=True)
def test_mcp_gives_the_same_words_in_the_context_and_in_search(facts: dict[str, str]) -> None:
    from mcp import Client as McpClient

    identity = Identity(user_id="alice", agent_name="coder", project_id=None, actor="key:test")

    async def main() -> tuple[Any, Any]:
        async with McpClient(build_server(lambda ctx: identity)) as c:
            return await c.call_tool("memory_context", {}), await c.call_tool(
                "memory_search", {"query": "bold headings"}
            )

    context, search = asyncio.run(main())
    for text in WORDS:
        assert _line(text) in context.structured_content["text"]
    assert search.structured_content["results"][0]["content"] == HTML


@pytest.mark.django_db
def test_the_preview_shows_the_block_as_text_escaped_once(viewer_client: Client, facts: dict[str, str]) -> None:
    body = viewer_client.get("/preview/", {"user": "alice", "agent": "coder", "mode": "auto"}).content.decode()
    shown = body[body.index('id="context-text"') :]
    shown = shown[: shown.index("</pre>")]
    assert "Result&lt;T, E&gt; &amp; the ? operator" in shown
    assert "R&amp;D at a lab" in shown
    assert "&lt;b&gt;bold&lt;/b&gt;" in shown and "<b>" not in body
    assert "&amp;lt;" not in body and "&amp;amp;" not in body, "escaped twice"


def _runtime() -> Any:
    class Runtime:
        context = ALICE
        config = {"configurable": {"thread_id": "t1"}}

    return Runtime()
