"""The injection log: what each agent was shown (a context block or search answer).

An entry names the cards and the revision each was at, the tokens and the SHA-256 of
the text, never the text: `seen_at` rebuilds what the agent read from the card
revisions. Serving only buffers an `Served` (the agents' doors, `memoryadmin.api_service`);
`write` turns a buffer into rows off the request path, hashing and resolving each
card's revision as of the moment it was served. `prune` keeps
MEMORY_INJECTION_LOG_DAYS (run by the worker's sweep); an erasure deletes a user's
entries (`facts.erasure.plan`).
"""

from __future__ import annotations

import bisect
import hashlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from facts.models import Erasure, FactCard, FactRevision, InjectedFact, Injection, ProfileRevision
from facts.storage.bulk import column
from facts.storage.cardfile import Card, parse_card
from facts.storage.errors import CardParseError
from facts.storage.profilefile import Profile


@dataclass(frozen=True)
class Served:
    """What the request path hands over: cheap to build (no hashing, no queries)."""

    served_at: datetime
    user_id: str
    agent_name: str
    project_id: str
    kind: str
    mode: str
    door: str
    fact_ids: tuple[str, ...]
    text: str
    tokens: int | None = None  # None: counted when written


def _revisions(served: Sequence[Served]) -> dict[tuple[str, datetime], int]:
    """(fact id, served at) → the card's revision at that moment (the newest revision
    written before it was served)."""
    ids = sorted({fact_id for s in served for fact_id in s.fact_ids})
    if not ids:
        return {}
    history: dict[str, list[tuple[datetime, int]]] = {}
    rows = FactRevision.objects.filter(fact_id__in=ids).order_by("fact_id", "revision")
    for fact_id, revision, created in rows.values_list("fact_id", "revision", "created_at"):
        history.setdefault(fact_id, []).append((created, revision))
    out: dict[tuple[str, datetime], int] = {}
    for s in served:
        for fact_id in s.fact_ids:
            versions = history.get(fact_id, [])
            # Revisions are written in order: the last one not after the serving.
            n = bisect.bisect_right(versions, (s.served_at, sys.maxsize))
            if n:
                out[(fact_id, s.served_at)] = versions[n - 1][1]
    return out


def write(served: Sequence[Served], *, count_tokens: Callable[[str], int] | None = None) -> None:
    """Record buffered servings in one transaction. A serving of a user whose erasure
    began after it (or is running) is dropped: a buffer must not bring their log back.
    `count_tokens` counts the texts served without a count (the read side's counter)."""
    if not served:
        return
    users = {s.user_id for s in served}
    erasures: dict[str, list[tuple[datetime, str]]] = {}
    for user_id, started, status in Erasure.objects.filter(user_id__in=users).values_list(
        "user_id", "started_at", "status"
    ):
        erasures.setdefault(user_id, []).append((started, status))
    kept = [
        s
        for s in served
        if not any(
            status == Erasure.Status.RUNNING or started >= s.served_at
            for started, status in erasures.get(s.user_id, [])
        )
    ]
    if not kept:
        return
    revisions = _revisions(kept)
    existing = set(FactCard.objects.filter(id__in={f for s in kept for f in s.fact_ids}).values_list("id", flat=True))
    with transaction.atomic():
        rows = Injection.objects.bulk_create(
            [
                Injection(
                    served_at=s.served_at,
                    user_id=s.user_id,
                    agent_name=s.agent_name,
                    project_id=s.project_id,
                    kind=s.kind,
                    mode=s.mode,
                    door=s.door,
                    tokens=s.tokens if s.tokens is not None else (count_tokens(s.text) if count_tokens else 0),
                    text_sha256=digest(s.text),
                )
                for s in kept
            ]
        )
        if rows and rows[0].pk is None:  # a backend that does not return ids (not ours)
            raise RuntimeError("bulk_create returned no ids")
        # Plain rows, not model instances: a busy server flushes ~10k of them a second
        # (50 facts a render), and building the instances held the GIL for ~0.1 s, a
        # stall every request in the process felt (context p99 150 ms at 8 clients).
        columns = ", ".join(column(InjectedFact, name) for name in ("injection", "fact_id", "revision", "position"))
        with connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {InjectedFact._meta.db_table} ({columns}) VALUES (%s, %s, %s, %s)",
                [
                    (row.pk, fact_id, revisions.get((fact_id, s.served_at)), n)
                    for row, s in zip(rows, kept, strict=True)
                    for n, fact_id in enumerate(s.fact_ids)
                    if fact_id in existing
                ],
            )


def prune(*, now: datetime | None = None, days: int | None = None) -> int:
    """Delete entries older than the retention; returns how many went."""
    days = settings.MEMORY_INJECTION_LOG_DAYS if days is None else days
    cutoff = (now or timezone.now()) - timedelta(days=days)
    _deleted, per_model = Injection.objects.filter(served_at__lt=cutoff).delete()
    return per_model.get(Injection._meta.label, 0)


def last_injected(fact_id: str, limit: int = 5) -> list[Injection]:
    """The latest servings that contained the card, newest first."""
    ids = InjectedFact.objects.filter(fact_id=fact_id).values("injection_id")
    return list(Injection.objects.filter(pk__in=ids).order_by("-served_at", "-pk")[:limit])


@dataclass
class SeenFact:
    fact_id: str
    revision: int | None
    card: Card | None  # None: the revision is no longer recorded (erased or pruned)


@dataclass
class Seen:
    """What an agent was shown at a moment: the serving in force then and its cards."""

    injection: Injection | None
    facts: list[SeenFact] = field(default_factory=list)
    profile: Profile | None = None


def seen_at(user_id: str, agent_name: str, at: datetime, *, kind: str = Injection.Kind.CONTEXT) -> Seen:
    """The last `kind` served to the user × agent at or before `at`, its cards at the
    revisions served, and the profile as it stood then (the context block's top)."""
    query = Injection.objects.filter(user_id=user_id, served_at__lte=at, kind=kind)
    if agent_name:
        query = query.filter(agent_name=agent_name)
    injection = query.order_by("-served_at", "-pk").first()
    if injection is None:
        return Seen(None)
    wanted = list(injection.facts.order_by("position").values_list("fact_id", "revision"))
    texts: dict[tuple[str, int | None], str] = {
        (f, r): t
        for f, r, t in FactRevision.objects.filter(fact_id__in=[f for f, _ in wanted]).values_list(
            "fact_id", "revision", "text"
        )
    }
    facts = []
    for fact_id, revision in wanted:
        text = texts.get((fact_id, revision))
        card = None
        if text is not None:
            try:
                card = parse_card(text, Path(fact_id))
            except CardParseError:
                card = None
        facts.append(SeenFact(fact_id, revision, card))
    profile = None
    if kind == Injection.Kind.CONTEXT:
        doc = (
            ProfileRevision.objects.filter(user_id=user_id, created_at__lte=injection.served_at)
            .order_by("-revision")
            .first()
        )
        profile = Profile.model_validate(doc.document) if doc is not None else None
    return Seen(injection, facts, profile)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
