"""The MCP server as clients meet it (issue 20): `manage.py mcp` over stdio as a real
subprocess, and Streamable HTTP at /mcp of a real `manage.py serve` (waitress) with a
real `db_worker`, driven by the SDK's own client.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.factories import fact_candidate
from tests.openai_stub import OpenAIStub

from .helpers_reliability.procs import REPO, Env, report_numbers

pytestmark = pytest.mark.slow

TOOLS = {"memory_search", "memory_context", "memory_list", "memory_remember", "memory_forget"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(client: Client, steps: Callable[[Client], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with client:
            return await steps(client)

    return asyncio.run(main())


def refusal(client: Client) -> str:
    """The MCPError the SDK client raises (inside its task groups) for a refused request."""
    with pytest.raises(Exception) as caught:
        run(client, lambda c: c.list_tools())
    error: BaseException = caught.value
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    assert isinstance(error, MCPError), repr(error)
    return str(error)


# --- stdio -----------------------------------------------------------------------------


def stdio(env: Env, user: str, agent: str = "coder") -> Client:
    params = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp", "--user", user, "--agent", agent],
        env=env.vars,
        cwd=str(REPO),
    )
    return Client(params)


def test_stdio_serves_one_users_memory_to_a_client_that_starts_it(proc_env: Env) -> None:
    env = Env(
        {k: v for k, v in proc_env.vars.items() if k not in ("MEMORY_LLM_BASE_URL", "MEMORY_EXTRACTOR")}, proc_env.root
    )

    async def alice(c: Client) -> dict[str, Any]:
        tools = await c.list_tools()
        remembered = await c.call_tool("memory_remember", {"text": "I prefer answers in English, please."})
        return {
            "tools": tools,
            "remembered": remembered,
            "search": await c.call_tool("memory_search", {"query": "English"}),
            "context": await c.call_tool("memory_context", {"mode": "auto"}),
            "list": await c.call_tool("memory_list", {"category": "preference"}),
        }

    started = time.monotonic()
    done = run(stdio(env, "alice"), alice)
    seconds = round(time.monotonic() - started, 2)
    assert {tool.name for tool in done["tools"].tools} == TOOLS
    remembered = done["remembered"].structured_content
    assert remembered["status"] == "done", remembered
    [verdict] = remembered["verdicts"]
    assert verdict["verdict"] == "accepted"
    fact_id = verdict["fact_id"]
    assert [hit["id"] for hit in done["search"].structured_content["results"]] == [fact_id]
    assert "English" in done["context"].structured_content["text"]
    assert [fact["id"] for fact in done["list"].structured_content["facts"]] == [fact_id]

    async def bob(c: Client) -> list[Any]:
        return [
            await c.call_tool("memory_search", {"query": "English"}),
            await c.call_tool("memory_forget", {"fact_id": fact_id, "reason": "not bob's"}),
        ]

    search, forget = run(stdio(env, "bob"), bob)
    assert search.structured_content["results"] == []
    assert forget.is_error and "unknown fact" in forget.content[0].text

    forgot = run(stdio(env, "alice"), lambda c: c.call_tool("memory_forget", {"fact_id": fact_id, "reason": "done"}))
    assert forgot.structured_content["status"] == "expired"
    audit = env.django(
        "from facts.models import AuditEvent\n"
        "print([(e.actor, e.target) for e in AuditEvent.objects.filter(action='expire')])"
    )
    assert audit.strip().splitlines()[-1] == repr([("mcp:stdio", fact_id)])
    report_numbers("mcp-stdio", first_session_seconds=seconds)


def test_stdio_refuses_an_id_that_looks_like_a_path(proc_env: Env) -> None:
    done = proc_env.manage("mcp", "--user", "../bob", check=False, timeout=60)
    assert done.returncode != 0 and "--user" in done.stderr and done.stdout == ""


# --- Streamable HTTP on the real server ------------------------------------------------------


def _stop(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.fixture
def live(proc_env: Env, openai_stub: OpenAIStub, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """`manage.py serve` and a `db_worker`, as `make run` starts them, extracting with the stub model."""
    env = Env(
        dict(
            proc_env.vars,
            TASKS_BACKEND="django_tasks_db.DatabaseBackend",
            MEMORY_EXTRACTOR="llm",
            MEMORY_LLM_BASE_URL=openai_stub.url,
            MEMORY_LLM_API_KEY="test-key",
            MEMORY_LLM_MODEL="stub-model",
            MEMORY_LLM_MAX_RETRIES="0",
            MCP_REMEMBER_WAIT_SECONDS="30",
            DEBUG="0",
            ALLOWED_HOSTS="127.0.0.1",
            API_AUTH_FAILURE_LIMIT="50",
        ),
        proc_env.root,
    )
    keys = {
        "any": env.manage("create_api_key", "any").stdout.strip(),
        "coder": env.manage("create_api_key", "coder only", "--agents", "coder").stdout.strip(),
        "acme": env.manage("create_api_key", "acme", "--users", "acme:*").stdout.strip(),
    }
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    logs = {name: tmp_path / f"{name}.log" for name in ("serve", "worker")}
    with logs["serve"].open("w") as out:
        server = env.popen(
            "manage.py", "serve", "--listen", f"127.0.0.1:{port}",
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    with logs["worker"].open("w") as out:
        worker = env.popen(
            "manage.py", "db_worker", "--no-reload", "--no-startup-delay", "--interval", "0.2", "--skip-checks",
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None, logs["serve"].read_text()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url + "/api/v1/openapi.json", timeout=5).status_code == 200:
                    break
            assert time.monotonic() < deadline, "the server did not answer"
            time.sleep(0.3)
        yield {"env": env, "url": url + "/mcp", "keys": keys, "stub": openai_stub}
    finally:
        _stop(worker)
        _stop(server)
    for path in logs.values():
        assert "Traceback" not in path.read_text(), path.read_text()


def over_http(live: dict[str, Any], key: str | None, user: str | None = "alice", agent: str = "coder") -> Client:
    headers = {"X-Memory-Agent": agent}
    if key:
        headers["Authorization"] = f"Bearer {live['keys'].get(key, key)}"
    if user:
        headers["X-Memory-User"] = user
    return Client(streamable_http_client(live["url"], http_client=httpx2.AsyncClient(headers=headers, timeout=60)))


def test_http_serves_every_tool_and_remember_goes_through_the_worker_and_the_gate(live: dict[str, Any]) -> None:
    text = "我主要做 Python 后端开发，平时请用中文解释技术问题。这周先帮我修一下登录的 bug。"
    live["stub"].reply_tool_call(
        {
            "facts": [
                fact_candidate(evidence_message_id="m1"),
                fact_candidate(
                    key="todo", content="修登录 bug", durability="temporary", evidence_message_id="m1",
                    evidence_text="这周先帮我修一下登录的 bug",
                ),
            ],
            "summaries": [],
            "confirmations": [],
        }
    )  # fmt: skip

    async def steps(c: Client) -> dict[str, Any]:
        started = time.monotonic()
        remembered = await c.call_tool("memory_remember", {"text": text})
        remember_seconds = round(time.monotonic() - started, 2)
        return {
            "tools": await c.list_tools(),
            "remembered": remembered,
            "remember_seconds": remember_seconds,
            "search": await c.call_tool("memory_search", {"query": "中文", "limit": 3}),
            "context": await c.call_tool("memory_context", {}),
            "list": await c.call_tool("memory_list", {}),
        }

    done = run(over_http(live, "coder"), steps)
    assert {tool.name for tool in done["tools"].tools} == TOOLS
    remembered = done["remembered"].structured_content
    assert remembered["status"] == "done", remembered
    verdicts = {v["key"]: (v["verdict"], v["reasons"]) for v in remembered["verdicts"]}
    assert verdicts == {"response_language": ("accepted", []), "todo": ("rejected", ["temporary"])}
    fact_id = next(v["fact_id"] for v in remembered["verdicts"] if v["verdict"] == "accepted")
    assert [hit["id"] for hit in done["search"].structured_content["results"]] == [fact_id]
    assert "用户偏好用中文解释技术问题" in done["context"].structured_content["text"]
    assert [fact["id"] for fact in done["list"].structured_content["facts"]] == [fact_id]

    # isolation: the same key for another user, and a tenant key for its own users
    others = run(over_http(live, "any", "bob"), lambda c: c.call_tool("memory_list", {}))
    assert others.structured_content["facts"] == []
    not_bobs = run(
        over_http(live, "any", "bob"), lambda c: c.call_tool("memory_forget", {"fact_id": fact_id, "reason": "x"})
    )
    assert not_bobs.is_error and "unknown fact" in not_bobs.content[0].text
    tenant = run(over_http(live, "acme", "acme:ann"), lambda c: c.call_tool("memory_search", {"query": "中文"}))
    assert tenant.structured_content["results"] == []

    forgot = run(over_http(live, "coder"), lambda c: c.call_tool("memory_forget", {"fact_id": fact_id, "reason": "ok"}))
    assert forgot.structured_content["status"] == "expired"
    after = run(over_http(live, "coder"), lambda c: c.call_tool("memory_list", {}))
    assert after.structured_content["facts"] == []
    report_numbers("mcp-http-remember", remember_seconds=done["remember_seconds"])


def test_http_refuses_clients_without_a_valid_key_or_outside_its_limits(live: dict[str, Any]) -> None:
    assert "send an API key" in refusal(over_http(live, None))
    assert "unknown API key" in refusal(over_http(live, "mem_wrong"))
    assert "may not act for the agent 'writer'" in refusal(over_http(live, "coder", agent="writer"))
    assert "may not act for the user 'alice'" in refusal(over_http(live, "acme", "alice"))
    assert "X-Memory-User: is required" in refusal(over_http(live, "any", None))
    assert live["stub"].requests == []  # nothing refused ever reached extraction
