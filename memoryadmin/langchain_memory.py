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
- Two implementations of one `Memory` protocol: `LocalMemory` (in-process, through
  `memoryadmin.api_service`) and `MemoryClient` (the HTTP API). A failing memory never
  breaks the agent's turn: the failure is logged and the turn queued for a retry
  (`MemoryClient`: in a local SQLite file, `DurableOutbox`, that outlives the process).

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
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NotRequired, Protocol, runtime_checkable

import filelock
import httpx
from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.summarization import SummarizationMiddleware
from langchain.agents.middleware.types import PrivateStateAttr
from langchain.tools import ToolRuntime, tool
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, RemoveMessage, SystemMessage
from langchain_core.tools import BaseTool

log = logging.getLogger(__name__)

MEMORY_ORIGIN = "memory"
_SUMMARY_SOURCE = "summarization"
_ROLE = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "function"}


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

    outbox: Outbox | DurableOutbox

    def record_turn(
        self, ctx: MemoryContext, messages: Sequence[Mapping[str, Any]], *, flush: bool = False
    ) -> dict[str, Any]: ...

    def context(self, ctx: MemoryContext, *, mode: str = "auto") -> dict[str, Any]: ...

    def search(self, ctx: MemoryContext, query: str, *, limit: int = 5) -> list[dict[str, Any]]: ...


# --- the retry queue -------------------------------------------------------------


@dataclass
class _Pending:
    ctx: MemoryContext
    messages: list[dict[str, Any]]
    flush: bool
    attempts: int = 0
    not_before: float = 0.0


class Outbox:
    """In-memory outbox (`LocalMemory`, tests): turns that could not be delivered,
    retried before the next delivery (oldest first) and by `retry()`. Bounded: when
    full, the oldest turn is dropped and logged. Lost with the process: `MemoryClient`
    uses `DurableOutbox`."""

    def __init__(self, maxlen: int = 1000, base_delay: float = 1.0, max_delay: float = 300.0) -> None:
        self._items: deque[_Pending] = deque()
        self._lock = threading.Lock()
        self.maxlen = maxlen
        self.base_delay = base_delay
        self.max_delay = max_delay

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: _Pending) -> None:
        with self._lock:
            if len(self._items) >= self.maxlen:
                dropped = self._items.popleft()
                log.error("memory outbox full; dropped a turn of %s", dropped.ctx.user_id)
            item.attempts += 1
            item.not_before = time.monotonic() + min(self.max_delay, self.base_delay * 2 ** (item.attempts - 1))
            self._items.append(item)

    def retry(self, memory: Memory, *, force: bool = False) -> int:
        """Deliver what is due; returns how many were delivered."""
        delivered = 0
        now = time.monotonic()
        with self._lock:
            due = [item for item in self._items if force or item.not_before <= now]
            for item in due:
                self._items.remove(item)
        for index, item in enumerate(due):
            try:
                memory.record_turn(item.ctx, item.messages, flush=item.flush)
                delivered += 1
            except MemoryRejected as exc:
                log.error("memory refused a queued turn of %s: %s", item.ctx.user_id, exc)
            except Exception as exc:
                log.warning("memory still unavailable (%s); %d turns stay queued", exc, len(due) - index)
                for rest in due[index:]:
                    self.put(rest)
                break
        return delivered

    def deliver(self, memory: Memory, ctx: MemoryContext, messages: list[dict[str, Any]], *, flush: bool) -> bool:
        if len(self):
            self.retry(memory)
        return _send_or_log(memory, ctx, messages, flush=flush, queue=self)


class DurableOutbox:
    """`MemoryClient`'s outbox: every turn is written to a small local SQLite file first
    and deleted only once the memory service took it, so turns queued while the service
    is down survive the agent process exiting or being killed.

    - **Where**: `path`, else ``$MEMORY_OUTBOX_PATH``, else
      ``$XDG_STATE_HOME/memoryadmin/outbox.sqlite3`` (``~/.local/state/…``); folder 0700,
      file 0600 (it holds conversations).
    - **Whose**: each row is tagged with its destination (the server URL and a
      fingerprint of the API key, never the key); a client delivers only its own rows,
      so agents of several servers can share the file.
    - **Order and once**: rows go out oldest first, under a cross-process file lock
      (one deliverer at a time, threads and processes alike); a row is deleted after the
      server accepted it. A process killed between the two resends it next time, which
      the server ignores (it skips message ids it has already seen).
    - **When**: at each new turn (one attempt, whatever the backoff), when a client
      starts (`MemoryClient` delivers what an earlier process left, in a background
      thread), and by `retry()` (due rows only: exponential backoff per destination).
    - **Bounded**: at most `max_turns` rows and `max_bytes` of turn bodies in the file;
      beyond that the oldest rows are dropped with a warning naming how many.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        destination: str,
        url: str = "",
        max_turns: int | None = None,
        max_bytes: int | None = None,
        base_delay: float = 1.0,
        max_delay: float = 300.0,
        lock_timeout: float = 15.0,
    ) -> None:
        self.path = Path(path) if path else default_outbox_path()
        self.destination = destination
        self.url = url
        self.max_turns = max_turns if max_turns is not None else _env_int("MEMORY_OUTBOX_MAX_TURNS", 1000)
        self.max_bytes = max_bytes if max_bytes is not None else _env_int("MEMORY_OUTBOX_MAX_BYTES", 32 * 2**20)
        self.base_delay = base_delay
        self.max_delay = max_delay
        # One deliverer at a time; filelock's default is per thread, so two threads of
        # one process exclude each other as two processes do (flock on separate fds).
        self._delivery = filelock.FileLock(f"{self.path}.lock", timeout=lock_timeout, mode=0o600)
        self._local = threading.local()
        self._create()

    # storage

    def _create(self) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Created 0600 before SQLite opens it; the -wal and -shm files take its mode.
        os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
        conn = self._connect()
        # Switching a new file to WAL can fail at once with "database is locked" while
        # another process is switching it too (SQLite calls no busy handler there): the
        # switch is retried, and skipped when the file already is in WAL mode.
        deadline = time.monotonic() + 30
        while True:
            try:
                if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    conn.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        with conn:
            conn.executescript(_OUTBOX_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        """This thread's connection (opened again in a forked child), in autocommit mode:
        transactions are explicit. Kept open: closing the last connection of a WAL file
        checkpoints and removes it, milliseconds on every call. FULL: a queued turn
        survives a power cut too, not just a kill."""
        conn = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():
            # A connection inherited through fork is left alone, never used nor closed.
            self._local.inherited = conn
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            conn.execute("PRAGMA synchronous=FULL")
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def close(self) -> None:
        """Closes this thread's connection (others close when their thread ends)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            conn.close()
        self._local.conn = None

    def __len__(self) -> int:
        """Turns of this destination waiting in the file."""
        with self._connect() as conn:
            return conn.execute("SELECT COUNT(*) FROM turns WHERE destination = ?", (self.destination,)).fetchone()[0]

    def put(self, ctx: MemoryContext, messages: Sequence[Mapping[str, Any]], *, flush: bool) -> int | None:
        """Queue a turn behind the others; returns its row id (None if the bound dropped it)."""
        body = json.dumps(
            {"ctx": asdict(ctx), "messages": [dict(m) for m in messages], "flush": flush},
            ensure_ascii=False,
            allow_nan=False,
        )
        size = len(body.encode("utf-8"))
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                seq = conn.execute(
                    "INSERT INTO turns (destination, url, queued_at, body, size) VALUES (?, ?, ?, ?, ?)",
                    (self.destination, self.url, time.time(), body, size),
                ).lastrowid
                dropped = self._enforce_bound(conn)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return None if dropped and seq is not None and seq <= dropped else seq

    def _enforce_bound(self, conn: sqlite3.Connection) -> int:
        """Drop the oldest rows beyond the bound (all destinations: it bounds the file);
        returns the highest dropped row id, 0 when nothing was dropped."""
        over = conn.execute(
            "SELECT MAX(seq), COUNT(*), MIN(queued_at), MAX(queued_at), COALESCE(SUM(size), 0) FROM ("
            "  SELECT seq, queued_at, size, ROW_NUMBER() OVER newest AS n, SUM(size) OVER newest AS total"
            "  FROM turns WINDOW newest AS (ORDER BY seq DESC)"
            ") WHERE n > ? OR total > ?",
            (self.max_turns, self.max_bytes),
        ).fetchone()
        cutoff, count, first, last, size = over
        if not count:
            return 0
        conn.execute("DELETE FROM turns WHERE seq <= ?", (cutoff,))
        log.warning(
            "memory outbox %s is full (at most %d turns, %d bytes): dropped the %d oldest undelivered turns "
            "(%d bytes, queued %s to %s)",
            self.path,
            self.max_turns,
            self.max_bytes,
            count,
            size,
            _when(first),
            _when(last),
        )
        return int(cutoff)

    def _pending(self, conn: sqlite3.Connection, limit: int = 50) -> list[tuple[int, str, int, float]]:
        return conn.execute(
            "SELECT seq, body, attempts, not_before FROM turns WHERE destination = ? ORDER BY seq LIMIT ?",
            (self.destination, limit),
        ).fetchall()

    def _delete(self, seq: int) -> None:
        with self._connect() as conn:
            conn.execute("DELETE FROM turns WHERE seq = ?", (seq,))

    def _postpone(self, seq: int, attempts: int, error: str) -> None:
        delay = min(self.max_delay, self.base_delay * 2 ** min(attempts, 30))
        with self._connect() as conn:
            conn.execute(
                "UPDATE turns SET attempts = ?, not_before = ?, last_error = ? WHERE seq = ?",
                (attempts + 1, time.time() + delay, error[:500], seq),
            )

    def queued_elsewhere(self) -> int:
        """Rows for this server queued under another API key (not ours to send)."""
        with self._connect() as conn:
            return conn.execute(
                "SELECT COUNT(*) FROM turns WHERE url = ? AND destination != ?", (self.url, self.destination)
            ).fetchone()[0]

    # delivery

    def retry(self, memory: Memory, *, force: bool = False) -> int:
        """Deliver this destination's rows in order until one fails; returns how many went.
        Without `force`, nothing is tried before the oldest row's backoff has passed."""
        try:
            self._delivery.acquire()
        except filelock.Timeout:
            # Someone else is delivering (and will take our rows too, oldest first).
            return 0
        delivered = 0
        try:
            while True:
                with self._connect() as conn:
                    rows = self._pending(conn)
                if not rows or (not force and rows[0][3] > time.time()):
                    return delivered
                for seq, body, attempts, _ in rows:
                    try:
                        data = json.loads(body)
                        ctx = MemoryContext(**data["ctx"])
                    except (ValueError, TypeError, KeyError) as exc:
                        log.error("memory outbox %s: row %d cannot be read (dropped): %s", self.path, seq, exc)
                        self._delete(seq)
                        continue
                    try:
                        memory.record_turn(ctx, data["messages"], flush=data["flush"])
                    except MemoryRejected as exc:
                        log.error("memory refused a queued turn of %s (dropped): %s", ctx.user_id, exc)
                    except Exception as exc:
                        self._postpone(seq, attempts, str(exc))
                        log.warning("memory unavailable (%s); %d turns stay queued in %s", exc, len(self), self.path)
                        return delivered
                    else:
                        delivered += 1
                    self._delete(seq)
                force = True  # the service answers again: keep going until the queue is empty
        finally:
            self._delivery.release()

    def deliver(self, memory: Memory, ctx: MemoryContext, messages: list[dict[str, Any]], *, flush: bool) -> bool:
        """Queue the turn, then send the queue (this turn last). True when it is delivered."""
        try:
            seq = self.put(ctx, messages, flush=flush)
        except (sqlite3.Error, OSError, ValueError) as exc:
            log.error("memory outbox %s cannot queue the turn (%s): sending the turn without it", self.path, exc)
            return _send_or_log(memory, ctx, messages, flush=flush, queue=None)
        try:
            self.retry(memory, force=True)
            if seq is None:
                return False
            with self._connect() as conn:
                return conn.execute("SELECT 1 FROM turns WHERE seq = ?", (seq,)).fetchone() is None
        except Exception as exc:  # never into the agent's turn: the row is safe in the file
            log.error("memory outbox %s: delivery failed (%s); the turn stays queued", self.path, exc)
            return False


_OUTBOX_SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- delivery order; AUTOINCREMENT: never reused
    destination TEXT NOT NULL,              -- server URL + API key fingerprint
    url TEXT NOT NULL,
    queued_at REAL NOT NULL,
    body TEXT NOT NULL,                     -- {"ctx", "messages", "flush"}
    size INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    not_before REAL NOT NULL DEFAULT 0,
    last_error TEXT
);
-- retry(): the oldest rows of one destination
CREATE INDEX IF NOT EXISTS turns_destination_seq ON turns (destination, seq);
"""


def default_outbox_path() -> Path:
    """``$MEMORY_OUTBOX_PATH``, else the XDG state folder: agents' runtime state that
    must outlive the process, not configuration and not a cache."""
    explicit = os.environ.get("MEMORY_OUTBOX_PATH")
    if explicit:
        return Path(explicit).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "memoryadmin" / "outbox.sqlite3"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    return int(raw) if raw.strip() else default


def _when(timestamp: float | None) -> str:
    return "?" if timestamp is None else datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _send_or_log(
    memory: Memory, ctx: MemoryContext, messages: list[dict[str, Any]], *, flush: bool, queue: Outbox | None
) -> bool:
    try:
        memory.record_turn(ctx, messages, flush=flush)
        return True
    except MemoryRejected as exc:
        log.error("memory refused the turn of %s: %s", ctx.user_id, exc)
    except Exception as exc:
        if queue is None:
            log.error("memory unavailable and no outbox: the turn of %s is lost: %s", ctx.user_id, exc)
        else:
            log.warning("memory unavailable, turn queued for retry: %s", exc)
            queue.put(_Pending(ctx, messages, flush))
    return False


def deliver(memory: Memory, ctx: MemoryContext, messages: list[dict[str, Any]], *, flush: bool) -> bool:
    """Send a turn without ever raising; queued turns go first, failures are queued."""
    return memory.outbox.deliver(memory, ctx, messages, flush=flush)


# --- two implementations -----------------------------------------------------------


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
        self, ctx: MemoryContext, messages: Sequence[Mapping[str, Any]], *, flush: bool = False
    ) -> dict[str, Any]:
        from facts.erasure import ErasureInProgress
        from facts.turns import TurnRejected, clean_turn
        from memoryadmin import api_service

        try:
            # The validation the HTTP API applies, with the same words.
            turn = clean_turn(
                user_id=ctx.user_id,
                agent_name=ctx.agent_name,
                thread_id=ctx.thread_id,
                project_id=ctx.project_id,
                messages=[dict(m) for m in messages],
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
        from memoryadmin import api_service

        return api_service.serve_context(self._scope(ctx), mode=mode)

    def search(self, ctx: MemoryContext, query: str, *, limit: int = 5) -> list[dict[str, Any]]:
        from memoryadmin import api_service

        return api_service.serve_search(self._scope(ctx), query, limit=max(1, min(int(limit), 10)))


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
        params = {"user_id": ctx.user_id}
        if ctx.agent_name:
            params["agent_name"] = ctx.agent_name
        if ctx.project_id:
            params["project_id"] = ctx.project_id
        return params

    def record_turn(
        self, ctx: MemoryContext, messages: Sequence[Mapping[str, Any]], *, flush: bool = False
    ) -> dict[str, Any]:
        body = {
            "user_id": ctx.user_id,
            "agent_name": ctx.agent_name,
            "thread_id": ctx.thread_id,
            "project_id": ctx.project_id,
            "messages": [dict(m) for m in messages],
        }
        return self._call("POST", "/flush" if flush else "/turns", json=body)

    def context(self, ctx: MemoryContext, *, mode: str = "auto") -> dict[str, Any]:
        return self._call("GET", "/context", params={**self._params(ctx), "mode": mode})

    def search(self, ctx: MemoryContext, query: str, *, limit: int = 5) -> list[dict[str, Any]]:
        params = {**self._params(ctx), "q": query, "limit": str(max(1, min(int(limit), 10)))}
        return self._call("GET", "/search", params=params)["results"]


# --- messages on the wire ------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    # NaN and ±Infinity are not JSON and the API refuses them (facts/sanitize.py); a score
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
        data["tool_call_id"] = message.tool_call_id  # type: ignore[attr-defined]
    if message.name:
        data["name"] = message.name
    return data


def is_injected(message: BaseMessage) -> bool:
    """Memory we injected, or a summary the summarizer wrote: never the user's words."""
    meta = message.additional_kwargs or {}
    return meta.get("origin") in {MEMORY_ORIGIN, "runtime", "upload"} or meta.get("lc_source") == _SUMMARY_SOURCE


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

        Use specific keywords, e.g. "中文 解释" or "code style". Returns a JSON list of
        facts (id, content, category, confidence, score), best first.
        """
        ctx = runtime_context(runtime)
        if ctx is None:
            return json.dumps({"error": "no user in the runtime context"})
        try:
            results = memory.search(ctx, query, limit=max(1, min(int(limit), 10)))
        except Exception as exc:
            log.warning("memory_search failed: %s", exc)
            return json.dumps({"error": "memory is unavailable right now", "results": []})
        return json.dumps(results, ensure_ascii=False)

    return memory_search


# --- the middleware ------------------------------------------------------------------


class MemoryState(AgentState):
    # The run's real user input, captured before summarization can remove or rewrite it.
    memory_turn: NotRequired[Annotated[list[dict[str, Any]], PrivateStateAttr]]


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
