"""The two implementations of the `Memory` protocol: `LocalMemory` calls the same
functions as the HTTP views, in process; `MemoryClient` speaks the HTTP API
(``Authorization: Bearer <api_key>``) and queues undelivered turns in a `DurableOutbox`.
Neither imports LangChain; `LocalMemory` imports Django only when called.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import httpx

from facts.storage.ids import DEFAULT_AGENT
from retrieval.limits import clamp_limit

from .memory_protocol import MemoryContext, MemoryRejected, MemoryUnavailable
from .outbox import DurableOutbox, Outbox

log = logging.getLogger(__name__)


class LocalMemory:
    """In-process memory: the same functions the HTTP views call."""

    def __init__(self) -> None:
        self.outbox = Outbox()

    @staticmethod
    def _scope(ctx: MemoryContext) -> Any:
        from memoryadmin import api_service
        from memoryadmin.api_schemas import clean_agent, clean_id

        return api_service.Scope(
            str(clean_id("user_id", ctx.user_id, required=True)),
            clean_agent(ctx.agent_name),
            clean_id("project_id", ctx.project_id, required=False),
        )

    def record_turn(
        self,
        ctx: MemoryContext,
        messages: Sequence[Mapping[str, Any]],
        *,
        flush: bool = False,
        created_at: str | datetime | None = None,
    ) -> dict[str, Any]:
        from facts.erasure.guard import ErasureInProgress
        from facts.intake.turns import TurnRejected, clean_turn
        from memoryadmin import api_service

        try:
            # The validation the HTTP API applies, with the same words.
            turn = clean_turn(
                user_id=ctx.user_id,
                agent_name=ctx.agent_name,
                thread_id=ctx.thread_id,
                project_id=ctx.project_id,
                messages=[dict(m) for m in messages],
                created_at=created_at,
                allow_paths=False,
            )
            return api_service.accept_turn(turn, flush=flush)
        except TurnRejected as exc:
            raise MemoryRejected(str(exc)) from exc
        except ErasureInProgress as exc:
            # As over HTTP (409): refused for good, never queued to arrive after the erasure.
            raise MemoryRejected(str(exc)) from exc
        except Exception as exc:
            raise MemoryUnavailable(str(exc)) from exc

    def context(self, ctx: MemoryContext, *, mode: str = "auto") -> dict[str, Any]:
        from facts.tenancy import ProjectNotAllowed
        from memoryadmin import api_service

        try:
            return api_service.serve_context(self._scope(ctx), mode=mode, door="local")
        except ProjectNotAllowed as exc:  # as over HTTP (403): refused, not a failure to retry
            raise MemoryRejected(str(exc)) from exc

    def search(self, ctx: MemoryContext, query: str, *, limit: int = 5) -> list[dict[str, Any]]:
        from facts.tenancy import ProjectNotAllowed
        from memoryadmin import api_service

        try:
            return api_service.serve_search(self._scope(ctx), query, limit=limit, door="local")
        except ProjectNotAllowed as exc:
            raise MemoryRejected(str(exc)) from exc


class MemoryClient:
    """The same memory through the HTTP API (``Authorization: Bearer <api_key>``)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 5.0,
        transport: httpx.BaseTransport | None = None,
        outbox_path: str | os.PathLike[str] | None = None,
        outbox_max_turns: int | None = None,
        outbox_max_bytes: int | None = None,
        deliver_queued_on_start: bool = True,
    ) -> None:
        url = base_url.rstrip("/")
        fingerprint = hashlib.sha256(api_key.encode("utf-8")).hexdigest()[:16]
        self.outbox = DurableOutbox(
            outbox_path,
            destination=f"{url} key:{fingerprint}",
            url=url,
            max_turns=outbox_max_turns,
            max_bytes=outbox_max_bytes,
            lock_timeout=2 * timeout + 5,
        )
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + "/api/v1",
            headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"},
            timeout=timeout,
            transport=transport,
        )
        self._starting: threading.Thread | None = None
        self._unknown_agents: set[str] = set()
        if deliver_queued_on_start:
            self._deliver_left_over()

    def _deliver_left_over(self) -> None:
        """Turns an earlier process queued (it exited or was killed while the service was
        down) go out now, in the background: constructing a client never waits on them."""
        elsewhere = self.outbox.queued_elsewhere()
        if elsewhere:
            log.warning(
                "memory outbox %s holds %d turns for %s queued under another API key: a client using that "
                "key delivers them",
                self.outbox.path,
                elsewhere,
                self.outbox.url,
            )
        if len(self.outbox):
            self._starting = threading.Thread(target=self._retry_quietly, name="memory-outbox", daemon=True)
            self._starting.start()

    def _retry_quietly(self) -> None:
        try:
            self.outbox.retry(self, force=True)
        except Exception:  # a background thread has no caller to tell
            log.exception("delivering the memory outbox failed")

    def close(self) -> None:
        self._http.close()
        self.outbox.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise MemoryUnavailable(f"{method} {path}: {exc.__class__.__name__}: {exc}") from exc
        if response.status_code >= 400:
            try:
                error = response.json()["error"]
                detail = f"{error['code']}: {error['message']}"
            except (ValueError, KeyError, TypeError):
                detail = response.text[:200]
            problem = f"{method} {path} → {response.status_code} {detail}"
            if response.status_code == 429 or response.status_code >= 500:
                raise MemoryUnavailable(problem)
            raise MemoryRejected(problem)
        return response.json()

    @staticmethod
    def _params(ctx: MemoryContext) -> dict[str, str]:
        # The reads require agent_name: an agent without one reads the default bucket,
        # where its turns went.
        params = {"user_id": ctx.user_id, "agent_name": ctx.agent_name or DEFAULT_AGENT}
        if ctx.project_id:
            params["project_id"] = ctx.project_id
        return params

    def _read(self, path: str, params: dict[str, str]) -> Any:
        """A read; None when the API says the agent is unknown: an agent before its first
        turn has no memory yet (said once per agent in the log, where a typo shows)."""
        try:
            return self._call("GET", path, params=params)
        except MemoryRejected as exc:
            if "unknown_agent" not in str(exc):
                raise
            if params["agent_name"] not in self._unknown_agents:
                self._unknown_agents.add(params["agent_name"])
                log.info("memory: %s (answering with no memory)", exc)
            return None

    def record_turn(
        self,
        ctx: MemoryContext,
        messages: Sequence[Mapping[str, Any]],
        *,
        flush: bool = False,
        created_at: str | datetime | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "user_id": ctx.user_id,
            "agent_name": ctx.agent_name,
            "thread_id": ctx.thread_id,
            "project_id": ctx.project_id,
            "messages": [dict(m) for m in messages],
        }
        if created_at is not None:
            # A naive datetime goes as it is, and the server refuses it (no time zone).
            body["created_at"] = created_at.isoformat() if isinstance(created_at, datetime) else created_at
        return self._call("POST", "/flush" if flush else "/turns", json=body)

    def context(self, ctx: MemoryContext, *, mode: str = "auto") -> dict[str, Any]:
        body = self._read("/context", {**self._params(ctx), "mode": mode})
        return body if body is not None else {"text": "", "tokens": 0, "included": [], "excluded": []}

    def search(self, ctx: MemoryContext, query: str, *, limit: int = 5) -> list[dict[str, Any]]:
        params = {**self._params(ctx), "q": query, "limit": str(clamp_limit(limit))}
        body = self._read("/search", params)
        return body["results"] if body is not None else []
