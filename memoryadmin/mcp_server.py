"""The MCP door to memory: five tools over the same service functions as the JSON API.

Built with the official SDK's `MCPServer`; no protocol code here. Who the caller is
(user, agent, project, and the key's name for the audit) never comes from a tool
argument: `build_server` takes a function that finds it in the request — fixed by the
command line for stdio (`manage.py mcp`), put into the WSGI environ by the
authenticated HTTP view for Streamable HTTP (`memoryadmin/mcp_http.py`).

Tools are plain (sync) functions: the SDK runs them in a worker thread, where the ORM
may be used, and each call closes the database connections it leaves behind as
Django's request cycle would.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from django.conf import settings
from django.db import close_old_connections
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from facts.enums import Category
from facts.erasure.guard import ErasureInProgress
from facts.intake.turns import TurnRejected, clean_turn
from facts.tenancy import ProjectNotAllowed
from retrieval.indexdb import IndexUnavailable

from . import api_service

SERVER_NAME = "memory"
INSTRUCTIONS = (
    "Long-term memory of the user you are working for. Search it (memory_search) before "
    "answering questions that may depend on the user's preferences or context, or load the "
    "whole memory block once (memory_context). memory_remember records the user's own words; "
    "a deterministic gate decides what becomes memory, so only remember what the user said."
)


@dataclass(frozen=True)
class Identity:
    """Whose memory a session reads and grows, and who acts (for the audit log)."""

    user_id: str
    agent_name: str
    project_id: str | None
    actor: str
    key_id: str = ""  # the API key's (HTTP); stdio has none: one client per process
    key_agents: tuple[str, ...] = ()  # the agents that key is limited to (they are known)

    @property
    def scope(self) -> api_service.Scope:
        return api_service.Scope(self.user_id, self.agent_name, self.project_id)


Identify = Callable[[Context], Identity]


# --- structured results ------------------------------------------------------------


class SearchHit(BaseModel):
    id: str
    content: str
    category: str
    confidence: float
    score: float
    truncated: bool = False


class SearchResult(BaseModel):
    results: list[SearchHit]


class Excluded(BaseModel):
    id: str
    reason: str = Field(description="budget, correction_budget, top_n or expired")


class ContextResult(BaseModel):
    text: str = Field(description="The memory block exactly as an agent is shown it")
    tokens: int
    included: list[str]
    excluded: list[Excluded]


class FactItem(BaseModel):
    id: str
    key: str
    category: str
    content: str
    confidence: float
    scope: Literal["user", "project"]
    updated_at: str


class FactList(BaseModel):
    facts: list[FactItem]


class Verdict(BaseModel):
    kind: str = Field(description="fact, summary or confirmation")
    key: str
    content: str
    verdict: Literal["accepted", "rejected"]
    reasons: list[str] = Field(description="Reason codes of every rule the candidate failed")
    review_state: str = Field(description="pending: waits for a reviewer (manual review mode or rejected)")
    fact_id: str | None = Field(description="The card it became, when it went live")


class RememberResult(BaseModel):
    turn_id: int | None
    thread_id: str
    status: str = Field(description="done, skipped (nothing to extract), pending, processing or failed")
    verdicts: list[Verdict]
    message: str


class ForgetResult(BaseModel):
    id: str
    status: str
    expires_at: str
    revision: int


# --- the server --------------------------------------------------------------------

READ_ONLY = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)


def build_server(identify: Identify) -> MCPServer:
    server = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, version="1")

    def who(ctx: Context) -> Identity:
        close_old_connections()
        return identify(ctx)

    @server.tool(annotations=READ_ONLY)
    def memory_search(
        query: Annotated[str, Field(min_length=1, max_length=2000, description="Words to look for")],
        ctx: Context,
        limit: Annotated[int, Field(ge=1, le=10, description="How many facts at most")] = 5,
    ) -> SearchResult:
        """Search the user's long-term memory (facts about their preferences, context,
        goals and corrections) for this agent, best match first. Naming a day ("on May
        2nd", "5月2日") finds what the user said that day."""
        identity = who(ctx)
        with _read_errors():
            api_service.check_agent(identity.agent_name, identity.key_agents)
            hits = api_service.serve_search(identity.scope, query, limit=limit, door="mcp")
        return SearchResult(results=[SearchHit.model_validate(hit) for hit in hits])

    @server.tool(annotations=READ_ONLY)
    def memory_context(
        ctx: Context,
        mode: Annotated[
            Literal["auto", "tool"],
            Field(description="auto: profile and facts; tool: the profile only (search for facts)"),
        ] = "auto",
    ) -> ContextResult:
        """The memory block this agent is given at the start of a conversation, rendered
        now within the agent's token budgets."""
        identity = who(ctx)
        with _read_errors():
            api_service.check_agent(identity.agent_name, identity.key_agents)
            body = api_service.serve_context(identity.scope, mode=mode, door="mcp")
        return ContextResult.model_validate(body)

    @server.tool(annotations=READ_ONLY)
    def memory_list(
        ctx: Context,
        category: Annotated[Category | None, Field(description="Only facts of this category")] = None,
        limit: Annotated[int, Field(ge=1, le=200, description="How many facts at most")] = 50,
    ) -> FactList:
        """The user's active facts for this agent (and this project's), newest first."""
        identity = who(ctx)
        with _read_errors():
            rows = api_service.list_facts(identity.scope, category=category, limit=limit)
        return FactList(facts=[FactItem.model_validate(row) for row in rows])

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False))
    def memory_remember(
        text: Annotated[str, Field(min_length=1, description="What the user said, in their own words")],
        ctx: Context,
        created_at: Annotated[
            str | None,
            Field(
                description="When the user said it, ISO 8601 with its offset (2024-05-01T09:30:00+02:00 or "
                "…Z); leave it out for now. A fact from it is dated then. Not in the future."
            ),
        ] = None,
    ) -> RememberResult:
        """Ask memory to remember something the user said. The text is recorded as the
        user's own message and judged like any conversation: only durable, descriptive
        facts about the user pass the gate; everything else is kept for review."""
        identity = who(ctx)
        try:
            return _remember(identity, text, created_at)
        finally:
            close_old_connections()

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False))
    def memory_forget(
        fact_id: Annotated[str, Field(description="The id of the fact, e.g. fact_0123456789ab")],
        reason: Annotated[str, Field(min_length=1, max_length=500, description="Why it is wrong or outdated")],
        ctx: Context,
    ) -> ForgetResult:
        """Expire one of the user's facts now. Nothing is deleted: the fact leaves the
        memory the agent sees and stays in its history, where a reviewer can restore it."""
        identity = who(ctx)
        try:
            done = api_service.expire_fact(identity.scope, fact_id, actor=identity.actor, reason=reason.strip())
        except api_service.UnknownFact:
            raise ToolError(f"unknown fact {fact_id!r}: no such fact in this user's memory for this agent") from None
        except ValueError as exc:
            raise ToolError(f"not forgotten: {exc}") from None
        finally:
            close_old_connections()
        return ForgetResult.model_validate(done)

    return server


@contextmanager
def _read_errors() -> Iterator[None]:
    """A read's refusals as the tool errors an agent is shown (the JSON API answers
    them 403, 404 and 503), and the database connection closed after."""
    try:
        yield
    except ProjectNotAllowed as exc:
        raise ToolError(str(exc)) from None
    except (IndexUnavailable, api_service.UnknownAgent) as exc:
        raise ToolError(exc.message) from None
    finally:
        close_old_connections()


def _remember(identity: Identity, text: str, created_at: str | None = None) -> RememberResult:
    if not text.strip():
        raise ToolError("text: must not be blank")
    limit = int(settings.API_MAX_MESSAGE_CHARS)
    if len(text) > limit:
        raise ToolError(f"text: is longer than {limit} characters")
    # Each call is its own thread: two calls are never merged into one extraction, and a
    # text remembered again after being forgotten is not skipped as already seen.
    token = uuid.uuid4().hex[:16]
    thread_id = f"mcp-{token}"
    # One message per thread, so a fixed id is unique where ids must be (its thread).
    message = {"id": "m1", "role": "user", "content": text}
    try:
        turn = clean_turn(
            user_id=identity.user_id,
            agent_name=identity.agent_name,
            thread_id=thread_id,
            project_id=identity.project_id,
            messages=[message],
            created_at=created_at,
            allow_paths=False,
        )
        receipt = api_service.accept_turn(turn, flush=True)
    except TurnRejected as exc:
        raise ToolError(f"{exc.field}: {exc.message}") from None
    except ErasureInProgress as exc:
        raise ToolError(str(exc)) from None
    turn_ids = list(receipt["turn_ids"])
    with _waiting_slot(identity.key_id or identity.actor) as allowed:
        outcome = _wait_for(turn_ids, allowed)
    status = outcome["status"]
    verdicts = [Verdict.model_validate(row) for row in outcome["verdicts"]]
    if status in ("pending", "processing") and not allowed:
        message_text = (
            "recorded; not waiting for the worker: other memory_remember calls are already waiting "
            "(see the review queue or memory_list later)"
        )
    elif status in ("pending", "processing"):
        message_text = "recorded; the worker has not judged it yet (see the review queue or memory_list later)"
    elif status == "failed":
        message_text = f"recorded; extraction failed and will be retried: {outcome['error']}"
    elif not verdicts:
        message_text = "recorded; nothing in it was a candidate for memory"
    else:
        kept = sum(1 for v in verdicts if v.verdict == "accepted")
        message_text = f"recorded; {kept} of {len(verdicts)} candidates accepted by the gate"
    return RememberResult(
        turn_id=turn_ids[0] if turn_ids else None,
        thread_id=thread_id,
        status=status,
        verdicts=verdicts,
        message=message_text,
    )


# A remember waits for the worker on one of the server's threads. Bounded three ways
# (issue 34), so that waiting calls can never hold the threads every other request
# needs: each wait lasts at most MCP_REMEMBER_WAIT_SECONDS, itself capped at
# `MAX_WAIT_SECONDS`; one key has at most MCP_REMEMBER_WAITS_PER_KEY calls waiting;
# and all keys together at most half the server's threads. A call past a limit is
# recorded all the same and answers at once: `pending`, judged later by the worker.
MAX_WAIT_SECONDS = 5.0
_waiting: dict[str, int] = {}
_waiting_lock = threading.Lock()


@contextmanager
def _waiting_slot(key: str) -> Iterator[float]:
    """Seconds this call may wait for the worker: the bound, or 0 past a limit."""
    seconds = min(float(settings.MCP_REMEMBER_WAIT_SECONDS), MAX_WAIT_SECONDS)
    per_key = int(settings.MCP_REMEMBER_WAITS_PER_KEY)
    in_all = max(1, int(settings.WEB_THREADS) // 2)
    with _waiting_lock:
        granted = seconds > 0 and _waiting.get(key, 0) < per_key and sum(_waiting.values()) < in_all
        if granted:
            _waiting[key] = _waiting.get(key, 0) + 1
    try:
        yield seconds if granted else 0.0
    finally:
        if granted:
            with _waiting_lock:
                _waiting[key] -= 1
                if not _waiting[key]:
                    del _waiting[key]


def _wait_for(turn_ids: list[int], seconds: float) -> dict[str, Any]:
    """Poll the turn until the worker has judged it or `seconds` have passed: the
    extraction itself runs in the worker, never in the caller's request."""
    deadline = time.monotonic() + seconds
    delay = 0.05
    while True:
        outcome = api_service.turn_outcome(turn_ids)
        if outcome["status"] not in ("pending", "processing") or time.monotonic() >= deadline:
            return outcome
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.5)
