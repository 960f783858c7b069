"""Long-term memory for LangChain v1 agents (`create_agent`).

- `LongTermMemoryMiddleware`: ``before_agent`` snapshots the real user input of the
  run (before any summarization can rewrite it); ``wrap_model_call`` renders the memory
  at every model call and prepends it to that request only, via
  ``request.override(messages=...)`` — it never enters the persisted thread; and
  ``after_agent`` sends the snapshot and the final reply for extraction.
- `make_memory_search_tool`: the ``memory_search`` tool; the user, agent and project
  come from the runtime context (`MemoryContext`), never from the model's arguments.
- `MemoryFlushingSummarization`: `SummarizationMiddleware` that first sends the
  messages it is about to summarize away to ``/flush`` (the server skips message ids
  it has already seen, so nothing is extracted twice).
- The memory behind them is any `Memory` (`memoryadmin.memory_protocol`):
  `LocalMemory` (in-process, through `memoryadmin.api_service`) or `MemoryClient` (the
  HTTP API), both in `memoryadmin.client`. A failing memory never breaks the agent's
  turn: the failure is logged and the turn queued for a retry (`memoryadmin.outbox`;
  `MemoryClient`: in a local SQLite file, `DurableOutbox`, that outlives the process).

Usage::

    memory = MemoryClient("http://127.0.0.1:8000", api_key)   # or LocalMemory()
    agent = create_agent(
        model,
        middleware=[
            LongTermMemoryMiddleware(memory, mode="auto"),
            MemoryFlushingSummarization(memory, model=summary_model, trigger=("tokens", 6000)),
        ],
        context_schema=MemoryContext,
        checkpointer=InMemorySaver(),
    )
    agent.invoke({"messages": [...]}, context=MemoryContext(user_id="alice", agent_name="coder"),
                 config={"configurable": {"thread_id": "t1"}})
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.summarization import SummarizationMiddleware
from langchain.agents.middleware.types import PrivateStateAttr
from langchain.tools import ToolRuntime, tool
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, RemoveMessage, SystemMessage
from langchain_core.tools import BaseTool

from facts.intake.filtering import INJECTED_ORIGINS
from retrieval.limits import clamp_limit

from .memory_protocol import Memory, MemoryContext
from .outbox import deliver

log = logging.getLogger(__name__)

MEMORY_ORIGIN = "memory"
_SUMMARY_SOURCE = "summarization"
_ROLE = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "function"}


# --- messages on the wire ------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    # NaN and ±Infinity are not JSON and the API refuses them (facts/intake/sanitize.py); a score
    # in a message's metadata must not cost the user's words, so they travel as null, as
    # JavaScript's JSON.stringify does.
    text = json.dumps(value, default=str, ensure_ascii=False)
    return json.loads(text, parse_constant=lambda _name: None)


def to_wire(message: BaseMessage) -> dict[str, Any]:
    """A message as the API takes it (``{id, role, content, additional_kwargs, …}``)."""
    data: dict[str, Any] = {
        "id": message.id,
        "role": _ROLE.get(message.type, message.type),
        "content": _jsonable(message.content),
    }
    if message.additional_kwargs:
        data["additional_kwargs"] = _jsonable(message.additional_kwargs)
    if isinstance(message, AIMessage) and message.tool_calls:
        data["tool_calls"] = _jsonable(message.tool_calls)
    if getattr(message, "tool_call_id", None):
        data["tool_call_id"] = message.tool_call_id
    if message.name:
        data["name"] = message.name
    return data


def is_injected(message: BaseMessage) -> bool:
    """Memory we injected, or a summary the summarizer wrote: never the user's words."""
    meta = message.additional_kwargs or {}
    return meta.get("origin") in INJECTED_ORIGINS or meta.get("lc_source") == _SUMMARY_SOURCE


def resolve_context(raw: Any, *, thread_id: str | None = None) -> MemoryContext | None:
    """The run's MemoryContext (a dataclass or a mapping), with the thread filled in."""
    if raw is None:
        return None
    if isinstance(raw, MemoryContext):
        ctx = raw
    elif isinstance(raw, Mapping) and raw.get("user_id"):
        ctx = MemoryContext(
            user_id=str(raw["user_id"]),
            agent_name=raw.get("agent_name"),
            project_id=raw.get("project_id"),
            thread_id=raw.get("thread_id"),
        )
    elif getattr(raw, "user_id", None):
        ctx = MemoryContext(
            user_id=str(raw.user_id),
            agent_name=getattr(raw, "agent_name", None),
            project_id=getattr(raw, "project_id", None),
            thread_id=getattr(raw, "thread_id", None),
        )
    else:
        return None
    if ctx.thread_id is None:
        ctx = MemoryContext(ctx.user_id, ctx.agent_name, ctx.project_id, thread_id or "default")
    return ctx


def _thread_of(runtime: Any) -> str | None:
    info = getattr(runtime, "execution_info", None)
    if info is not None and getattr(info, "thread_id", None):
        return str(info.thread_id)
    config = getattr(runtime, "config", None)
    if config is None:
        try:
            from langgraph.config import get_config

            config = get_config()
        except RuntimeError:
            config = None
    if config:
        thread = (config.get("configurable") or {}).get("thread_id")
        return None if thread is None else str(thread)
    return None


def runtime_context(runtime: Any) -> MemoryContext | None:
    return resolve_context(getattr(runtime, "context", None), thread_id=_thread_of(runtime))


# --- the tool ----------------------------------------------------------------------


def make_memory_search_tool(memory: Memory) -> BaseTool:
    """``memory_search(query, limit)``; whose memory is searched comes from the runtime."""

    @tool("memory_search")
    def memory_search(query: str, runtime: ToolRuntime[MemoryContext], limit: int = 5) -> str:
        """Search the current user's long-term memory (preferences, corrections, background).

        Use specific keywords, e.g. "中文 解释" or "code style"; naming a day ("on May
        2nd", "5月2日") finds what the user said that day. Returns a JSON list of facts
        (id, content, category, confidence, score), best first.
        """
        ctx = runtime_context(runtime)
        if ctx is None:
            return json.dumps({"error": "no user in the runtime context"})
        try:
            results = memory.search(ctx, query, limit=clamp_limit(limit))
        except Exception as exc:
            log.warning("memory_search failed: %s", exc)
            return json.dumps({"error": "memory is unavailable right now", "results": []})
        return json.dumps(results, ensure_ascii=False)

    return memory_search


# --- the middleware ------------------------------------------------------------------


class MemoryState(AgentState):
    # The run's real user input, captured before summarization can remove or rewrite it.
    # AgentState is a TypedDict, but mypy does not read LangChain (pyproject.toml).
    memory_turn: NotRequired[Annotated[list[dict[str, Any]], PrivateStateAttr]]  # type: ignore[valid-type]


def memory_message(text: str, *, as_system: bool = False) -> BaseMessage:
    meta = {"origin": MEMORY_ORIGIN, "hide_from_ui": True}
    if as_system:
        return SystemMessage(content=text, additional_kwargs=meta)
    return HumanMessage(content=text, additional_kwargs=meta)


class LongTermMemoryMiddleware(AgentMiddleware[MemoryState, MemoryContext]):
    state_schema = MemoryState

    def __init__(self, memory: Memory, mode: str = "auto", *, as_system: bool = False) -> None:
        super().__init__()
        if mode not in ("auto", "tool"):
            raise ValueError("mode must be 'auto' or 'tool'")
        self.memory = memory
        self.mode = mode
        self.as_system = as_system
        self.tools = [make_memory_search_tool(memory)] if mode == "tool" else []

    # before_agent: the snapshot
    def before_agent(self, state: MemoryState, runtime: Any) -> dict[str, Any] | None:
        messages = state.get("messages") or []
        tail: list[BaseMessage] = []
        for message in reversed(messages):
            if not isinstance(message, HumanMessage):
                break
            if not is_injected(message):
                tail.append(message)
        return {"memory_turn": [to_wire(m) for m in reversed(tail)]}

    # wrap_model_call: memory for this request only
    def _inject(self, request: ModelRequest) -> ModelRequest:
        ctx = runtime_context(request.runtime)
        if ctx is None:
            return request
        try:
            rendered = self.memory.context(ctx, mode=self.mode)
        except Exception as exc:
            log.warning("memory context unavailable, answering without it: %s", exc)
            return request
        text = (rendered or {}).get("text") or ""
        if not text.strip():
            return request
        return request.override(messages=[memory_message(text, as_system=self.as_system), *request.messages])

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        return handler(self._inject(request))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> Any:
        return await handler(await asyncio.to_thread(self._inject, request))

    # after_agent: the snapshot + what the run added, for extraction
    def turn_messages(self, state: MemoryState) -> list[dict[str, Any]]:
        snapshot = list(state.get("memory_turn") or [])
        messages: list[AnyMessage] = list(state.get("messages") or [])
        ids = {m["id"] for m in snapshot}
        start = 0
        for index, message in enumerate(messages):
            if message.id in ids or (message.additional_kwargs or {}).get("lc_source") == _SUMMARY_SOURCE:
                start = index + 1
        added = [m for m in messages[start:] if isinstance(m, HumanMessage) and not is_injected(m) and m.id not in ids]
        final = messages[-1] if messages and isinstance(messages[-1], AIMessage) else None
        out = snapshot + [to_wire(m) for m in added]
        if final is not None and not final.tool_calls and final.id not in ids:
            out.append(to_wire(final))
        return out

    def after_agent(self, state: MemoryState, runtime: Any) -> dict[str, Any] | None:
        ctx = runtime_context(runtime)
        if ctx is None:
            return None
        messages = self.turn_messages(state)
        if any(m["role"] == "user" for m in messages):
            deliver(self.memory, ctx, messages, flush=False)
        return None

    async def aafter_agent(self, state: MemoryState, runtime: Any) -> dict[str, Any] | None:
        ctx = runtime_context(runtime)
        if ctx is None:
            return None
        messages = self.turn_messages(state)
        if any(m["role"] == "user" for m in messages):
            await asyncio.to_thread(deliver, self.memory, ctx, messages, flush=False)
        return None


class MemoryFlushingSummarization(SummarizationMiddleware):
    """`SummarizationMiddleware` that flushes the messages it summarizes away first.

    The stock middleware's ``summarizer`` hook only sees the (trimmed) messages, not
    the run's user, so the seam is ``before_model``: when the parent decides to
    summarize, every message it is about to remove is sent to ``/flush`` before the
    state update is returned.
    """

    def __init__(self, memory: Memory, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.memory = memory

    def _flush(self, state: Any, update: dict[str, Any] | None, runtime: Any) -> None:
        if not update:
            return
        ctx = runtime_context(runtime)
        if ctx is None:
            return
        kept = {m.id for m in update.get("messages", []) if not isinstance(m, RemoveMessage)}
        removed = [
            m
            for m in state["messages"]
            if m.id not in kept and isinstance(m, (HumanMessage, AIMessage)) and not is_injected(m)
        ]
        if removed and any(isinstance(m, HumanMessage) for m in removed):
            deliver(self.memory, ctx, [to_wire(m) for m in removed], flush=True)

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        update = super().before_model(state, runtime)
        self._flush(state, update, runtime)
        return update

    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        update = await super().abefore_model(state, runtime)
        await asyncio.to_thread(self._flush, state, update, runtime)
        return update
