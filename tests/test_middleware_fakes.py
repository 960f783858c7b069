"""Fakes for the agent tests: a scripted chat model that supports tools, a memory that
records what it was sent, and an httpx transport into the Django test client.

(No tests here; the module name keeps it next to the tests that use it.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeAlias

import httpx
from django.test import Client
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field

from memoryadmin.memory_protocol import MemoryContext
from memoryadmin.outbox import Outbox

Reply: TypeAlias = AIMessage | str | Callable[[list[BaseMessage]], AIMessage | str]


class ScriptedChatModel(BaseChatModel):
    """Answers from a script (strings, AIMessages or functions of the prompt) and keeps
    every prompt it was given. Tools are accepted and ignored, as a real model's schema."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    script: list[Any] = Field(default_factory=list)
    default: str = "好的。"
    prompts: list[list[BaseMessage]] = Field(default_factory=list)
    bound_tools: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        self.bound_tools = [getattr(t, "name", None) or t.get("name", "") for t in tools]
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.prompts.append(list(messages))
        step: Reply = self.script.pop(0) if self.script else self.default
        if callable(step):
            step = step(list(messages))
        message = step if isinstance(step, AIMessage) else AIMessage(content=step)
        return ChatResult(generations=[ChatGeneration(message=message)])


class RecordingMemory:
    """A `Memory` that keeps what it was sent and answers from canned data."""

    def __init__(self, text: str = "长期记忆：用户偏好用中文解释技术问题。", results: list[dict] | None = None) -> None:
        self.outbox = Outbox()
        self.text = text
        self.results = results or []
        self.turns: list[tuple[MemoryContext, list[dict[str, Any]], bool]] = []
        self.context_calls: list[tuple[MemoryContext, str]] = []
        self.search_calls: list[tuple[MemoryContext, str, int]] = []
        self.fail: Exception | None = None

    def record_turn(
        self,
        ctx: MemoryContext,
        messages: Sequence[Mapping[str, Any]],
        *,
        flush: bool = False,
        created_at: str | datetime | None = None,
    ) -> dict:
        if self.fail is not None:
            raise self.fail
        self.turns.append((ctx, [dict(m) for m in messages], flush))
        return {"accepted": len(messages), "turn_ids": [len(self.turns)]}

    def context(self, ctx: MemoryContext, *, mode: str = "auto") -> dict:
        if self.fail is not None:
            raise self.fail
        self.context_calls.append((ctx, mode))
        return {"text": self.text, "tokens": 10, "included": [], "excluded": []}

    def search(self, ctx: MemoryContext, query: str, *, limit: int = 5) -> list[dict]:
        if self.fail is not None:
            raise self.fail
        self.search_calls.append((ctx, query, limit))
        return self.results


class DjangoTransport(httpx.BaseTransport):
    """httpx → Django test client, so `MemoryClient` runs the real views without a socket."""

    def __init__(self) -> None:
        self.client = Client()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in {"host", "content-length", "content-type"}
        }
        path = request.url.raw_path.decode()
        content = request.read()
        response = self.client.generic(
            request.method,
            path,
            data=content,
            content_type=request.headers.get("content-type", "application/octet-stream"),
            headers=headers,
        )
        return httpx.Response(response.status_code, headers=dict(response.items()), content=response.content)


class ReplayExtractor(BaseChatModel):
    """The extraction model, replayed: for every user row of the conversation it is shown,
    each rule whose phrase occurs in the row yields its candidates, with that row and
    phrase as the evidence. Keeps every conversation it was shown."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    # (phrase, facts, summaries): the evidence fields of each are replaced by the row and phrase.
    rules: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]] = Field(default_factory=list)
    conversations: list[list[dict[str, Any]]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "replay-extractor"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ReplayExtractor:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        import json

        payload = json.loads(messages[-1].content)
        rows = payload["conversation"]
        self.conversations.append(rows)
        update: dict[str, list[dict[str, Any]]] = {"facts": [], "summaries": [], "confirmations": []}
        for row in rows:
            if row["role"] != "user":
                continue
            for phrase, facts, summaries in self.rules:
                if phrase in row["content"]:
                    evidence = {"evidence_message_id": row["id"], "evidence_text": phrase}
                    update["facts"] += [{**fact, **evidence} for fact in facts]
                    update["summaries"] += [{**summary, **evidence} for summary in summaries]
        call = {"name": "MemoryUpdate", "args": update, "id": "extract-1", "type": "tool_call"}
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="", tool_calls=[call]))])
