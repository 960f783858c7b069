"""What the agents' front door does, shared by the HTTP views and the in-process
`LocalMemory`, so both paths behave the same.

It composes the write side (`facts.intake.queue`, `facts.storage.writer`) and the read side
(`retrieval.render`, `retrieval.search`) and owns neither.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from facts import injections, tenancy
from facts.curation import cards
from facts.enums import CardStatus
from facts.injections import Served
from facts.intake.queue import queue_turn
from facts.intake.turns import CleanTurn
from facts.models import Candidate, FactCard, FactUsage, Injection, Turn
from facts.storage.errors import InvalidId
from facts.storage.ids import DEFAULT_AGENT, check_fact_id, normalize_agent
from retrieval.render import render_context
from retrieval.search import memory_search_json
from retrieval.tokens import count_tokens

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Scope:
    user_id: str
    agent_name: str | None = None
    project_id: str | None = None


# --- write: turns ------------------------------------------------------------------


def accept_turn(turn: CleanTurn, *, flush: bool = False) -> dict[str, Any]:
    """Store the turn, validated by `facts.intake.turns.clean_turn` (before answering), and
    schedule its extraction."""
    with _writer_slot():
        receipt = queue_turn(turn, flush=flush)
    return {"accepted": receipt.accepted, "turn_ids": list(receipt.turn_ids)}


_sqlite_writers = threading.Lock()
_lock_file: tuple[int, str, int] | None = None  # (pid, path, fd)


def _process_lock_fd() -> int:
    global _lock_file
    path = str(Path(settings.MEMORY_ROOT) / ".api" / "writers.lock")
    if _lock_file is None or _lock_file[0] != os.getpid() or _lock_file[1] != path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        _lock_file = (os.getpid(), path, os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    return _lock_file[2]


@contextmanager
def _writer_slot() -> Iterator[None]:
    """On SQLite, one turn writer at a time across the API's processes.

    SQLite has one writer, and a connection that finds it busy waits in SQLite's busy
    handler, which sleeps in growing steps (up to 100 ms): under load those sleeps, not
    the work, set the latency. Queueing on a thread lock and then on flock() instead
    hands the database over the moment it is free (the kernel wakes the next waiter).
    """
    if connection.vendor != "sqlite":
        yield
        return
    with _sqlite_writers:
        fd = _process_lock_fd()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)


# --- read: context and search ------------------------------------------------------


class UnknownAgent(Exception):
    """A read for an agent nothing knows (`agent_known`): a typo in an agent's name
    would otherwise read as an agent with no memory. The API answers 404, MCP a tool
    error; the clients read it as no memory yet."""

    code = "unknown_agent"

    def __init__(self, agent_name: str) -> None:
        self.message = (
            f"agent_name: no agent {agent_name!r} is known (it has sent no turn and has no memory or settings); "
            "check the name. A new agent becomes known with its first turn."
        )
        super().__init__(self.message)


def check_agent(agent_name: str, allowed_agents: Sequence[str] = ()) -> None:
    """Raise `UnknownAgent` unless `agent_known`; `allowed_agents`: the caller's key's."""
    if not agent_known(agent_name, allowed_agents):
        raise UnknownAgent(agent_name)


def agent_known(agent_name: str, allowed_agents: Sequence[str] = ()) -> bool:
    """Whether `/context` and `/search` know this agent: the default bucket, an agent
    some key is limited to, one with settings (the Agents page), or one that has sent a
    turn or holds a card (each an indexed lookup). A new agent is known from its first
    turn; before it, its reads say "unknown agent" and the clients read that as no
    memory yet."""
    if agent_name == DEFAULT_AGENT or agent_name in allowed_agents:
        return True
    now = time.monotonic()
    if _known_agents.get(agent_name, 0.0) > now:
        return True
    from retrieval.models import AgentSettings

    known = (
        Turn.objects.filter(agent_name=agent_name).exists()
        or FactCard.objects.filter(agent_name=agent_name).exists()
        or AgentSettings.objects.filter(agent_name=agent_name).exists()
    )
    if known:
        if len(_known_agents) >= KNOWN_AGENTS_MAX:
            _known_agents.clear()
        _known_agents[agent_name] = now + KNOWN_AGENT_SECONDS
    return known


# A known agent is remembered for a while (the lookups cost ~0.3-0.5 ms, as much as a
# render); an unknown one never is, so an agent is known right after its first turn.
# An agent whose last user was erased is unknown to every server within this time.
KNOWN_AGENT_SECONDS = 30.0
KNOWN_AGENTS_MAX = 10_000
_known_agents: dict[str, float] = {}


def health() -> dict[str, Any]:
    """What `GET /api/v1/health` answers: whether memory can be served now (the database
    answers, the search index is ready), and if not, why."""
    from retrieval.indexconn import status

    body: dict[str, Any] = {"status": "ok"}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        body["database"] = "ok"
    except Exception as exc:
        body["status"] = "unavailable"
        body["database"] = f"{exc.__class__.__name__}: {exc}"
    index = status()
    body["index"] = index
    if index.get("state") != "ready":
        body["status"] = "unavailable"
    return body


def serve_context(
    scope: Scope, *, mode: str = "auto", now: datetime | None = None, door: str = "api"
) -> dict[str, Any]:
    """The memory block an agent is shown, rendered now (never cached per thread).
    Raises `facts.tenancy.ProjectNotAllowed` for a project of another tenant."""
    tenancy.check(scope.user_id, scope.project_id)
    rendered = render_context(
        user_id=scope.user_id, agent_name=scope.agent_name, project_id=scope.project_id, mode=mode, now=now
    )
    body = rendered.as_dict()
    included = list(rendered.included)
    count_usage("injected", included)
    log_injection(scope, Injection.Kind.CONTEXT, included, rendered.text, door=door, mode=mode, tokens=rendered.tokens)
    return body


def serve_search(scope: Scope, query: str, *, limit: int = 5, door: str = "api") -> list[dict[str, Any]]:
    """The memory_search results exactly as the tool shows them (clamped, token-capped).
    Raises `facts.tenancy.ProjectNotAllowed` for a project of another tenant."""
    tenancy.check(scope.user_id, scope.project_id)
    text = memory_search_json(
        query, user_id=scope.user_id, agent_name=scope.agent_name, project_id=scope.project_id, limit=limit
    )
    results = json.loads(text)
    ids = [row["id"] for row in results if isinstance(row, dict) and row.get("id")]
    count_usage("searched", ids)
    log_injection(scope, Injection.Kind.SEARCH, ids, text, door=door)
    return results


# --- usage counters ----------------------------------------------------------------
#
# Counting is bookkeeping, not part of the answer: by default the ids are buffered in
# the process and written by a background thread in one UPSERT per kind every
# API_USAGE_FLUSH_SECONDS, so a served context never waits for the database's write
# lock. With 0 the UPSERT runs inline (tests, scripts).

_buffer: dict[str, Counter[str]] = {"injected": Counter(), "searched": Counter()}
_buffer_lock = threading.Lock()
_served: list[Served] = []
_flusher: threading.Thread | None = None
_wake = threading.Event()


def _interval() -> float:
    return float(getattr(settings, "API_USAGE_FLUSH_SECONDS", 1.0))


def count_usage(kind: str, fact_ids: Iterable[str]) -> None:
    ids = [fact_id for fact_id in fact_ids if fact_id]
    if not ids:
        return
    if _interval() <= 0:
        write_usage(kind, Counter(ids))
        return
    with _buffer_lock:
        _buffer[kind].update(ids)
    _ensure_flusher()


def write_usage(kind: str, counts: Counter[str], *, at: datetime | None = None) -> None:
    """One INSERT … SELECT … ON CONFLICT DO UPDATE for every id (SQLite ≥ 3.24 and
    PostgreSQL). Only ids whose card is still in the mirror are counted: a count buffered
    in some process before the card was erased must not bring a row for it back."""
    if not counts:
        return
    at = at or timezone.now()
    quote = connection.ops.quote_name
    table, cards = quote(FactUsage._meta.db_table), quote(FactCard._meta.db_table)
    count_col, time_col, other_count, other_time = (
        ("injected_count", "last_injected_at", "searched_count", "last_searched_at")
        if kind == "injected"
        else ("searched_count", "last_searched_at", "injected_count", "last_injected_at")
    )
    rows = sorted(counts.items())
    values = ", ".join(["(%s, %s, %s)"] * len(rows))
    params: list[Any] = []
    for fact_id, n in rows:
        params.extend([fact_id, n, at])
    # VALUES columns are column1… on both databases; the WHERE also settles SQLite's
    # parsing ambiguity between INSERT … SELECT and ON CONFLICT.
    sql = (
        f"INSERT INTO {table} (fact_id, {count_col}, {other_count}, {time_col}, {other_time}) "
        f"SELECT v.column1, v.column2, 0, v.column3, NULL FROM (VALUES {values}) AS v "
        f"WHERE EXISTS (SELECT 1 FROM {cards} AS c WHERE c.id = v.column1) "
        f"ON CONFLICT (fact_id) DO UPDATE SET {count_col} = {table}.{count_col} + excluded.{count_col}, "
        f"{time_col} = excluded.{time_col}"
    )
    with connection.cursor() as cursor:  # one statement: atomic on its own
        cursor.execute(sql, params)


def log_injection(
    scope: Scope, kind: str, fact_ids: Sequence[str], text: str, *, door: str, mode: str = "", tokens: int | None = None
) -> None:
    """Buffer one entry of the injection log (`facts.injections`), written with the
    usage counters: the request only appends a tuple."""
    served = Served(
        served_at=timezone.now(),
        user_id=scope.user_id,
        agent_name=scope.agent_name or "",
        project_id=scope.project_id or "",
        kind=kind,
        mode=mode,
        door=door,
        fact_ids=tuple(fact_ids),
        text=text,
        tokens=tokens,
    )
    if _interval() <= 0:
        injections.write([served], count_tokens=count_tokens)
        return
    with _buffer_lock:
        _served.append(served)
    _ensure_flusher()


def flush_usage() -> None:
    """Write what is buffered now (also run at exit and by the background thread)."""
    global _served
    with _buffer_lock:
        pending = {kind: counts for kind, counts in _buffer.items() if counts}
        for kind in pending:
            _buffer[kind] = Counter()
        served, _served = _served, []
    if served:
        try:
            injections.write(served, count_tokens=count_tokens)
        except Exception:
            log.exception("could not write the injection log; %d entries dropped", len(served))
    for kind, counts in pending.items():
        try:
            write_usage(kind, counts)
        except Exception:
            log.exception("could not write %s usage counters; %d ids dropped", kind, len(counts))


def _ensure_flusher() -> None:
    global _flusher
    if _flusher is not None and _flusher.is_alive():
        return
    with _buffer_lock:
        if _flusher is not None and _flusher.is_alive():
            return
        _flusher = threading.Thread(target=_flush_loop, name="api-usage-flusher", daemon=True)
        _flusher.start()


def _flush_loop() -> None:
    while True:
        _wake.wait(max(_interval(), 0.05))
        _wake.clear()
        try:
            flush_usage()
        finally:
            connection.close()


atexit.register(flush_usage)


# --- facts of one scope: list and forget (MCP's memory_list / memory_forget) -------


class UnknownFact(LookupError):
    """No such fact in the caller's scope: another user's id answers the same as a
    made-up one, so an id reveals nothing about memory the caller may not see."""


def list_facts(scope: Scope, *, category: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """The active cards of the user × agent (and of the project when the scope has one),
    newest first, as the mirror holds them. Raises `facts.tenancy.ProjectNotAllowed` for
    a project of another tenant."""
    tenancy.check(scope.user_id, scope.project_id)
    agent = normalize_agent(scope.agent_name)
    buckets = FactCard.objects.filter(user_id=scope.user_id, agent_name=agent, project_id="")
    if scope.project_id:
        buckets = buckets | FactCard.objects.filter(user_id="", project_id=scope.project_id)
    rows = buckets.filter(status="active")
    if category:
        rows = rows.filter(category=category)
    return [
        {
            "id": row.id,
            "key": row.key,
            "category": row.category,
            "content": row.content,
            "confidence": row.confidence,
            "scope": "project" if row.project_id else "user",
            "updated_at": row.updated_at.isoformat(),
        }
        for row in rows.order_by("-updated_at", "id")[: max(1, int(limit))]
    ]


def expire_fact(scope: Scope, fact_id: str, *, actor: str, reason: str) -> dict[str, Any]:
    """Expire one active card of the user × agent now: the dashboard's verb
    (`facts.curation.cards.expire`), written and audited the same way. Never deletes: the card stays
    browsable and a reviewer can restore it. Project cards are shared by every user of
    the project, so one user's agent cannot expire them.

    Raises `UnknownFact` for an id outside the scope, `ValueError` for a card that is
    not active any more."""
    try:
        check_fact_id(fact_id)
    except InvalidId:
        raise UnknownFact(fact_id) from None
    agent = normalize_agent(scope.agent_name)
    row = FactCard.objects.filter(id=fact_id, user_id=scope.user_id, agent_name=agent, project_id="").first()
    if row is None:
        raise UnknownFact(fact_id)
    if row.status != CardStatus.ACTIVE:
        raise ValueError(f"{fact_id} is already {row.status}")
    card = cards.expire(row, actor=actor, reason=reason).card
    expires_at = card.expires_at.isoformat() if card.expires_at else None
    return {"id": card.id, "status": str(card.status), "expires_at": expires_at, "revision": card.revision}


def turn_outcome(turn_ids: Sequence[int]) -> dict[str, Any]:
    """Where the extraction of these turns stands: `pending` (or `processing`) until the
    worker has run, then the gate's verdict on every candidate, with its reasons."""
    turns = list(Turn.objects.filter(pk__in=list(turn_ids)).order_by("pk"))
    statuses = {turn.status for turn in turns}
    for status in ("failed", "processing", "pending"):
        if status in statuses:
            errors = [turn.error for turn in turns if turn.error]
            return {"status": status, "error": errors[0] if errors else "", "verdicts": []}
    run_ids = {turn.run_id for turn in turns if turn.run_id}
    candidates = Candidate.objects.filter(run_id__in=run_ids).order_by("run_id", "position")
    verdicts = [
        {
            "kind": candidate.kind,
            "key": candidate.key or candidate.section,
            "content": candidate.content,
            "verdict": candidate.verdict,
            "reasons": list(candidate.reasons or []),
            "review_state": candidate.review_state,
            "fact_id": candidate.fact_id or None,
        }
        for candidate in candidates
    ]
    return {"status": "done" if run_ids else ("skipped" if turns else "unknown"), "error": "", "verdicts": verdicts}
