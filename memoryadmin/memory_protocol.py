"""What an agent's memory is to the code that uses it: the `Memory` protocol (record a
turn, render the context, search) that `LocalMemory` and `MemoryClient` implement, the
run's `MemoryContext` (whose memory), and the errors a memory raises: transient
(`MemoryUnavailable`, worth a retry) or permanent (`MemoryRejected`). No Django, no
LangChain: an agent process imports it alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .outbox import DurableOutbox, Outbox


@dataclass(frozen=True)
class MemoryContext:
    """Who the agent is working for: passed as ``context=`` to ``agent.invoke``."""

    user_id: str
    agent_name: str | None = None
    project_id: str | None = None
    # Defaults to the run's ``configurable.thread_id``.
    thread_id: str | None = None


class MemoryBackendError(Exception):
    """Base class of memory failures seen by the middleware."""


class MemoryUnavailable(MemoryBackendError):
    """Transient: network, 5xx, 429, database locked. Worth retrying."""


class MemoryRejected(MemoryBackendError):
    """Permanent: the memory refused the request (4xx). Retrying would not help."""


@runtime_checkable
class Memory(Protocol):
    """What the middleware and the tool need; `LocalMemory` and `MemoryClient` agree."""

    @property
    def outbox(self) -> Outbox | DurableOutbox: ...

    def record_turn(
        self,
        ctx: MemoryContext,
        messages: Sequence[Mapping[str, Any]],
        *,
        flush: bool = False,
        created_at: str | datetime | None = None,
    ) -> dict[str, Any]:
        """Record a turn. `created_at`: when it was said (ISO 8601 with its offset, or an
        aware datetime), for every message that does not say its own
        (``additional_kwargs["created_at"]``); None: when it is received."""
        ...

    def context(self, ctx: MemoryContext, *, mode: str = "auto") -> dict[str, Any]: ...

    def search(self, ctx: MemoryContext, query: str, *, limit: int = 5) -> list[dict[str, Any]]: ...
