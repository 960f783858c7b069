"""Erasure: forget a user, or one agent, thread or project of theirs, down to the bytes.

DESIGN.md §10 "Forgetting is a write". One service for every door (`manage.py erase`,
the person page, "Forget this conversation"):

1. a durable marker (`Erasure` row, status running) is committed first: from then on
   turns in its scope are refused (`ErasureInProgress`, the API answers 409), the worker
   claims nothing of it, and the write function refuses new cards and profile changes
   of the user;
2. the cards go through the same locks and the same write function as any other change
   (`writer.commit` with `Delete`s, `writer.delete_profile`), so mirror and index follow;
3. what the files do not hold goes: turns, runs (filtered messages, raw model output),
   candidates, extracted message ids, card and profile revisions, usage counters,
   golden queries naming the erased cards, queued worker tasks carrying the user's ids;
   audit events keep that something happened but lose their free text;
4. the bytes: every SQLite file under MEMORY_ROOT and the Django SQLite database get
   FTS5 segments merged ('optimize'), a VACUUM with secure_delete (free pages and the
   free space inside pages held deleted text) and a WAL checkpoint(TRUNCATE);
5. one audit event with ids and counts, never content; the marker becomes `done`.

Every step is idempotent and looks at the files and rows as they are, so an erasure
killed at any point is finished by running it again (`erase` resumes the running marker
of the same scope).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
import os
import shutil
import signal
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from .cardfile import Card
from .errors import CardParseError
from .ids import normalize_agent, normalize_id
from .models import (
    AuditEvent,
    Candidate,
    Erasure,
    ExtractedMessage,
    ExtractionRun,
    FactCard,
    FactRevision,
    FactUsage,
    ProfileRevision,
    ProfileSection,
    Turn,
)
from .profilefile import Profile, Section
from .store import Bucket, Store, get_store

log = logging.getLogger(__name__)

# Ids listed per kind in the audit event and the dry run; the counts stay exact.
MAX_LISTED_IDS = 1000
FAILPOINT_ENV = "MEMORY_ERASE_FAILPOINT"
PROCESS_TASK = "facts.tasks.process_thread_task"
# Audit details that hold ids and numbers only; every other key (corrected content,
# keys, before/after) is dropped when an event names erased memory.
_AUDIT_ID_KEYS = frozenset(
    {"fact_id", "fact_ids", "revision", "to_revision", "deleted", "kind", "superseded", "project_id", "erased"}
)


class ErasureInProgress(Exception):
    """A turn or a memory write in the scope of a running erasure: refused, never half-kept."""

    def __init__(self, user_id: str) -> None:
        super().__init__(
            f"an erasure of user {user_id!r} is in progress; nothing of this user is accepted until it ends"
        )
        self.user_id = user_id


# --- scope ------------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """What to erase: a user, optionally narrowed to one agent, thread and/or project."""

    user_id: str
    agent_name: str = ""
    thread_id: str = ""
    project_id: str = ""

    @classmethod
    def of(
        cls, user_id: str, agent_name: str | None = None, thread_id: str | None = None, project_id: str | None = None
    ) -> Scope:
        """Validated the way the rest of the system validates ids (raises `InvalidId`)."""
        normalize_id(user_id, what="user_id")
        agent = normalize_agent(agent_name) if agent_name else ""
        if project_id:
            normalize_id(project_id, what="project_id")
        return cls(user_id, agent, thread_id or "", project_id or "")

    @property
    def whole_user(self) -> bool:
        return not (self.agent_name or self.thread_id or self.project_id)

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in vars(self).items() if v}

    def rows(self, with_project: bool = True) -> Q:
        """The DB rows of this scope (tables with user/agent/thread/project columns)."""
        query = Q(user_id=self.user_id)
        if self.agent_name:
            query &= Q(agent_name=self.agent_name)
        if self.thread_id:
            query &= Q(thread_id=self.thread_id)
        if self.project_id and with_project:
            query &= Q(project_id=self.project_id)
        return query

    def covers_turn(self, agent_name: str, thread_id: str, project_id: str = "") -> bool:
        return (
            self.agent_name in ("", agent_name)
            and self.thread_id in ("", thread_id)
            and (not self.project_id or not project_id or self.project_id == project_id)
        )


def _scope_of(marker: Erasure) -> Scope:
    return Scope(marker.user_id, marker.agent_name, marker.thread_id, marker.project_id)


# --- the guard: what other writers ask --------------------------------------------

_bypass: contextvars.ContextVar[bool] = contextvars.ContextVar("erasing", default=False)


def _lock_key(user_id: str) -> int:
    return int.from_bytes(hashlib.sha256(user_id.encode()).digest()[:8], "big", signed=True)


def _user_barrier(user_id: str, *, exclusive: bool) -> None:
    """Orders turns and erasure markers of one user on PostgreSQL.

    A turn takes the user's advisory lock shared before it checks for a marker; the
    marker's transaction takes it exclusively. So a turn either commits before the
    marker does (and the erasure, which looks afterwards, erases it) or sees the marker.
    SQLite needs nothing: its IMMEDIATE write transactions already run one at a time.
    Must run inside a transaction.
    """
    if connection.vendor != "postgresql":
        return
    function = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}(%s)", [_lock_key(user_id)])


def _running(user_ids: Iterable[str]) -> list[Erasure]:
    ids = list(set(user_ids))
    if not ids:
        return []
    return list(Erasure.objects.filter(status=Erasure.Status.RUNNING, user_id__in=ids))


def refuse_turn(user_id: str, agent_name: str, thread_id: str, project_id: str = "") -> None:
    """Raise `ErasureInProgress` when a running erasure covers this turn. Call it inside
    the transaction that writes the turn's rows (a Turn, a run, its candidates)."""
    if _bypass.get():
        return
    _user_barrier(user_id, exclusive=False)
    for marker in _running([user_id]):
        if _scope_of(marker).covers_turn(agent_name, thread_id, project_id):
            raise ErasureInProgress(user_id)


def refuse_cards(cards: Sequence[Card]) -> None:
    """The write function asks this under the bucket locks before writing any card: a
    card of a user being erased is refused (fail closed: any running erasure of the user
    refuses all of the user's new cards; a project card is refused when it came from a
    run of that user)."""
    if _bypass.get() or not cards or not Erasure.objects.filter(status=Erasure.Status.RUNNING).exists():
        return
    users = {c.user_id for c in cards if c.user_id is not None}
    markers = _running(users)
    if markers:
        raise ErasureInProgress(markers[0].user_id)
    run_ids = [int(c.source.run_id) for c in cards if c.user_id is None and (c.source.run_id or "").isdigit()]
    if run_ids:
        owners = set(ExtractionRun.objects.filter(pk__in=run_ids).values_list("user_id", flat=True))
        markers = _running(owners)
        if markers:
            raise ErasureInProgress(markers[0].user_id)


def refuse_runs(runs: Sequence[ExtractionRun]) -> None:
    """The gate asks this under the bucket locks before judging runs: refused when an
    erasure covers a run's thread, or when the run row is gone (an erasure finished
    while the run waited for its model)."""
    if _bypass.get() or not runs:
        return
    for run in runs:
        if any(
            _scope_of(m).covers_turn(run.agent_name, run.thread_id, run.project_id) for m in _running([run.user_id])
        ):
            raise ErasureInProgress(run.user_id)
    ids = {run.pk for run in runs}
    if ExtractionRun.objects.filter(pk__in=ids).count() != len(ids):
        raise ErasureInProgress(next(run.user_id for run in runs))


def refuse_profile(user_id: str) -> None:
    """The write function asks this under the user's lock before writing memory.json."""
    if _bypass.get():
        return
    if Erasure.objects.filter(status=Erasure.Status.RUNNING, user_id=user_id).exists():
        raise ErasureInProgress(user_id)


def erasing(user_id: str, agent_name: str, thread_id: str) -> bool:
    """Whether a running erasure covers this thread (the worker claims nothing of it)."""
    return any(_scope_of(m).covers_turn(agent_name, thread_id) for m in _running([user_id]))


def running_for(user_id: str) -> Erasure | None:
    return Erasure.objects.filter(status=Erasure.Status.RUNNING, user_id=user_id).order_by("pk").first()


# --- the plan (dry run) -----------------------------------------------------------


@dataclass
class Plan:
    """What an erasure of `scope` removes, found by reading files and rows (changes nothing)."""

    scope: Scope
    cards: list[Card] = field(default_factory=list)  # card files (user and project buckets)
    mirror_only: list[str] = field(default_factory=list)  # mirror rows whose file is gone
    unreadable: list[str] = field(default_factory=list)  # unparseable card files in a folder that goes
    profile: bool = False  # memory.json goes whole
    sections: list[str] = field(default_factory=list)  # or these sections are cleared
    profile_revisions: list[int] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    runs: list[int] = field(default_factory=list)
    candidates: list[int] = field(default_factory=list)
    extracted_messages: list[int] = field(default_factory=list)
    card_revisions: list[int] = field(default_factory=list)
    usage: list[str] = field(default_factory=list)
    golden_queries: list[int] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    audit_events: list[int] = field(default_factory=list)  # scrubbed, kept

    known: list[str] = field(default_factory=list)  # cards an earlier, interrupted run deleted

    @property
    def fact_ids(self) -> list[str]:
        return sorted({c.id for c in self.cards} | set(self.mirror_only) | set(self.known))

    def items(self) -> dict[str, list[Any]]:
        """Ids per kind, in a stable order (what the dry run lists)."""
        user_cards = sorted(c.id for c in self.cards if c.user_id is not None)
        project_cards = sorted(c.id for c in self.cards if c.user_id is None)
        return {
            "cards": user_cards,
            "project_cards": project_cards,
            "mirror_rows_without_file": sorted(self.mirror_only),
            "unreadable_card_files": sorted(self.unreadable),
            "profile": [self.scope.user_id] if self.profile else [],
            "profile_sections": list(self.sections),
            "profile_revisions": sorted(self.profile_revisions),
            "card_revisions": sorted(self.card_revisions),
            "usage_counters": sorted(self.usage),
            "turns": sorted(self.turns),
            "extraction_runs": sorted(self.runs),
            "candidates": sorted(self.candidates),
            "extracted_message_ids": sorted(self.extracted_messages),
            "golden_queries": sorted(self.golden_queries),
            "queued_tasks": sorted(self.tasks),
            "audit_events_scrubbed": sorted(self.audit_events),
        }

    def counts(self) -> dict[str, int]:
        return {kind: len(ids) for kind, ids in self.items().items()}

    @property
    def empty(self) -> bool:
        return not any(self.counts().values())


def plan(scope: Scope, *, store: Store | None = None) -> Plan:
    """The dry run: everything `erase(scope)` would remove. Reads only."""
    marker = Erasure.objects.filter(status=Erasure.Status.RUNNING, **vars(scope)).order_by("pk").first()
    return _collect(scope, store or get_store(), known=marker.fact_ids if marker else ())


def _scan(folder: Path) -> Iterator[Path]:
    if not folder.is_dir():
        return
    for dirpath, _dirs, files in os.walk(folder):
        for name in sorted(files):
            if name.endswith(".md") and not name.startswith("."):
                yield Path(dirpath) / name


def _read_cards(store: Store, folder: Path, unreadable: list[str]) -> Iterator[Card]:
    for path in _scan(folder):
        try:
            yield store.read_card_at(path)
        except (CardParseError, OSError):
            unreadable.append(store.relative(path))


def _collect(scope: Scope, store: Store, known: Iterable[str] = ()) -> Plan:
    out = Plan(scope, known=sorted(known))
    runs = ExtractionRun.objects.filter(scope.rows())
    out.runs = list(runs.values_list("pk", flat=True))
    run_keys = {str(pk) for pk in out.runs}

    # Cards of the user's buckets, read from the files (the truth), then the mirror's
    # rows for drift (a row whose file is already gone).
    user_dir = store.user_dir(scope.user_id)
    folder = user_dir / "agents" / scope.agent_name if scope.agent_name else user_dir / "agents"
    narrowed_by_source = bool(scope.thread_id or scope.project_id)
    unreadable: list[str] = []
    for card in _read_cards(store, folder, unreadable):
        if card.user_id != scope.user_id:
            continue  # a file in the wrong folder: not this user's
        if scope.thread_id and (card.source.thread_id or "") != scope.thread_id:
            continue
        if scope.project_id and (card.source.run_id or "") not in run_keys:
            continue
        out.cards.append(card)
    if not narrowed_by_source:
        out.unreadable = unreadable  # the whole folder goes, readable or not
    mirror = FactCard.objects.filter(user_id=scope.user_id)
    if scope.agent_name:
        mirror = mirror.filter(agent_name=scope.agent_name)
    if scope.thread_id:
        mirror = mirror.filter(source_thread_id=scope.thread_id)

    # Project cards whose source is one of this scope's runs (a project card has one
    # source: if it is this user's message, the card came only from this user).
    projects = set(runs.exclude(project_id="").values_list("project_id", flat=True))
    projects |= set(Turn.objects.filter(scope.rows()).exclude(project_id="").values_list("project_id", flat=True))
    if scope.project_id:
        projects = {scope.project_id}
    for project_id in sorted(projects):
        pfolder = store.facts_dir(Bucket(project_id=project_id))
        for card in _read_cards(store, pfolder, []):
            if card.user_id is None and (card.source.run_id or "") in run_keys:
                out.cards.append(card)
    on_disk = {c.id for c in out.cards}
    mirror_ids = {i for i, run in mirror.values_list("id", "source_run_id") if not scope.project_id or run in run_keys}
    project_rows = FactCard.objects.filter(user_id="", project_id__in=projects).values_list("id", "source_run_id")
    mirror_ids |= {i for i, run in project_rows if run in run_keys}
    out.mirror_only = sorted(mirror_ids - on_disk)
    out.known = sorted(set(out.known) - on_disk - mirror_ids)
    fact_ids = out.fact_ids

    # The profile: whole for a user; narrowed, the sections that came from the scope.
    if scope.whole_user:
        out.profile = (
            store.profile_path(scope.user_id).exists() or ProfileSection.objects.filter(user_id=scope.user_id).exists()
        )
        out.profile_revisions = list(ProfileRevision.objects.filter(user_id=scope.user_id).values_list("pk", flat=True))
    else:
        try:
            profile = store.read_profile(scope.user_id)
        except CardParseError:
            profile = None
        if profile is not None:
            out.sections = [
                name for name, section in _sections(profile.model_dump(mode="json")) if _from(scope, run_keys, section)
            ]
        out.profile_revisions = [
            pk
            for pk, document in ProfileRevision.objects.filter(user_id=scope.user_id).values_list("pk", "document")
            if any(_from(scope, run_keys, section) for _name, section in _sections(document))
        ]

    out.turns = list(Turn.objects.filter(scope.rows()).values_list("pk", flat=True))
    # Runs as a subquery and ids in chunks: a user may have more rows than SQLite
    # takes parameters in one statement.
    candidates = Candidate.objects.filter(Q(run__in=runs) | scope.rows())
    out.candidates = list(candidates.values_list("pk", flat=True))
    extracted = ExtractedMessage.objects.filter(run__in=runs)
    if not scope.project_id:
        extracted = ExtractedMessage.objects.filter(Q(run__in=runs) | scope.rows(with_project=False))
    out.extracted_messages = list(extracted.values_list("pk", flat=True))
    out.card_revisions = _values_in(FactRevision.objects.all(), "fact_id", fact_ids, "pk")
    out.usage = _values_in(FactUsage.objects.all(), "fact_id", fact_ids, "fact_id")
    out.golden_queries = _golden_queries(scope, set(fact_ids))
    out.tasks = [str(pk) for pk in _tasks(scope)]
    events = AuditEvent.objects.exclude(action=AuditEvent.Action.ERASE).exclude(reason="", details__erased=True)
    targets = fact_ids + [f"candidate:{pk}" for pk in out.candidates]
    found = set(_values_in(events, "target", targets, "pk"))
    if scope.whole_user:
        found |= set(events.filter(user_id=scope.user_id).values_list("pk", flat=True))
    out.audit_events = sorted(found)
    return out


CHUNK = 500


def _chunks(values: Sequence[Any]) -> Iterator[list[Any]]:
    values = list(values)
    for start in range(0, len(values), CHUNK):
        yield values[start : start + CHUNK]


def _values_in(query: QuerySet, field_name: str, values: Sequence[Any], column: str) -> list[Any]:
    out: list[Any] = []
    for chunk in _chunks(values):
        out += query.filter(**{f"{field_name}__in": chunk}).values_list(column, flat=True)
    return out


def _delete_in(query: QuerySet, field_name: str, values: Sequence[Any]) -> None:
    for chunk in _chunks(values):
        query.filter(**{f"{field_name}__in": chunk}).delete()


def _sections(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for group in ("user", "history"):
        for name, section in (document.get(group) or {}).items():
            if isinstance(section, dict):
                yield name, section


def _from(scope: Scope, run_keys: set[str], section: dict[str, Any]) -> bool:
    source = section.get("source") or {}
    if not section.get("summary") and not source:
        return False
    if (source.get("run_id") or "") in run_keys:
        return True
    return bool(scope.thread_id) and not scope.project_id and source.get("thread_id") == scope.thread_id


def _golden_queries(scope: Scope, fact_ids: set[str]) -> list[int]:
    from retrieval.models import GoldenQuery  # a model only: facts never imports the read side's views

    found = []
    rows = GoldenQuery.objects.values_list("pk", "user_id", "agent_name", "expected_ids", "last_result_ids")
    for pk, user_id, agent_name, expected, last in rows.iterator():
        named = fact_ids.intersection([*(expected or []), *(last or [])])
        mine = scope.whole_user and user_id == scope.user_id
        if (
            named
            or mine
            or (
                scope.agent_name
                and not scope.thread_id
                and not scope.project_id
                and user_id == scope.user_id
                and agent_name == scope.agent_name
            )
        ):
            found.append(pk)
    return found


def _tasks(scope: Scope) -> list[Any]:
    """Queued worker tasks whose arguments name this scope (user, agent, thread)."""
    if "django_tasks_db" not in settings.INSTALLED_APPS:
        return []
    from django_tasks_db.models import DBTaskResult

    query = DBTaskResult.objects.filter(task_path=PROCESS_TASK, args_kwargs__args__0=scope.user_id)
    if scope.agent_name:
        query = query.filter(args_kwargs__args__1=scope.agent_name)
    if scope.thread_id:
        query = query.filter(args_kwargs__args__2=scope.thread_id)
    return list(query.values_list("pk", flat=True))


# --- the erasure --------------------------------------------------------------------


@dataclass
class Report:
    erasure_id: int
    scope: Scope
    counts: dict[str, int]
    resumed: bool
    bytes: list[dict[str, Any]]


def _failpoint(name: str) -> None:
    """Tests kill the process here (`MEMORY_ERASE_FAILPOINT=name`) to prove a rerun finishes."""
    if os.environ.get(FAILPOINT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def _begin(scope: Scope, actor: str) -> tuple[Erasure, bool]:
    """The durable marker: an unfinished erasure of the same scope is resumed."""
    with transaction.atomic():
        _user_barrier(scope.user_id, exclusive=True)
        marker = Erasure.objects.filter(status=Erasure.Status.RUNNING, **vars(scope)).order_by("pk").first()
        if marker is not None:
            return marker, True
        return Erasure.objects.create(actor=actor, **vars(scope)), False


def erase(scope: Scope, *, actor: str, store: Store | None = None) -> Report:
    """Erase everything of `scope` (see the module docstring); safe to run again.

    Returns the counts per kind and what the byte pass did to each SQLite file. The
    audit event (`AuditEvent.Action.ERASE`) holds the actor, the scope's ids, the erased
    ids per kind (up to `MAX_LISTED_IDS` each) and the counts, never content.
    """
    store = store or get_store()
    marker, resumed = _begin(scope, actor)
    _failpoint("after_marker")
    token = _bypass.set(True)
    try:
        found = _erase_memory(scope, store, actor, marker)
        _failpoint("after_files")
        _erase_rows(found)
        _failpoint("after_rows")
        _remove_folder(store, scope)
    finally:
        _bypass.reset(token)
    scrubbed = scrub_bytes(store.root)
    _failpoint("after_bytes")
    marker.refresh_from_db()
    counts = {kind: max(n, found.counts().get(kind, 0)) for kind, n in marker.counts.items()}
    with transaction.atomic():
        AuditEvent.objects.create(
            actor=actor,
            action=AuditEvent.Action.ERASE,
            user_id=scope.user_id,
            agent_name=scope.agent_name,
            target=f"erasure:{marker.pk}",
            details={
                "scope": scope.as_dict(),
                "counts": counts,
                "ids": {kind: ids for kind, ids in marker.ids.items() if kind != "profile"},
                "resumed": resumed,
            },
        )
        Erasure.objects.filter(pk=marker.pk).update(
            status=Erasure.Status.DONE, counts=counts, finished_at=timezone.now()
        )
    _checkpoint_django_db()
    with contextlib.suppress(Exception):
        from django.core.cache import cache

        cache.clear()  # cached conflict lists hold card content
    return Report(marker.pk, scope, counts, resumed, scrubbed)


def _erase_memory(scope: Scope, store: Store, actor: str, marker: Erasure) -> Plan:
    """Cards and profile through the write function, under the locks of every bucket.

    The user's and the projects' locks are taken in one call (the store orders them,
    as every writer does); should the files name a project not locked yet, again with it.
    """
    from . import hooks, writer

    user_bucket = Bucket(user_id=scope.user_id, agent_name=None)
    project_buckets: set[Bucket] = set()
    while True:
        with store.lock(user_bucket, *project_buckets):
            marker.refresh_from_db()
            found = _collect(scope, store, known=marker.fact_ids)
            needed = {Bucket(project_id=c.project_id) for c in found.cards if c.user_id is None}
            if not needed <= project_buckets:
                project_buckets |= needed
                continue
            _remember(marker, found)
            ops = [writer.Delete(card) for card in found.cards]
            for start in range(0, len(ops), 500):
                writer.commit(ops[start : start + 500], actor=actor, reason="erasure", store=store)
                _failpoint("during_cards")
            # Rows whose file was already gone (drift, or a previous run killed between
            # the file and its mirror row): mirror, history and index entries.
            _delete_in(FactCard.objects.all(), "id", found.mirror_only)
            if found.mirror_only:
                hooks.cards_changed([], [Card.model_construct(id=i) for i in found.mirror_only])
            for rel in found.unreadable:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(store.root / rel)
            if found.profile:
                writer.delete_profile(scope.user_id, store=store)
            elif found.sections:
                writer.commit_profile(
                    scope.user_id, _clearing(found.sections), actor=actor, reason="erasure", store=store
                )
            return found


def _clearing(names: Sequence[str]) -> Callable[[Profile], Profile]:
    def clear(profile: Profile) -> Profile:
        for name in names:
            profile.set_section(name, Section())
        return profile

    return clear


def _remember(marker: Erasure, found: Plan) -> None:
    """What this run found, merged into the marker before anything is deleted: the ids
    the rows' pass and the audit need even when a rerun no longer finds their cards."""
    counts = dict(marker.counts or {})
    ids = {kind: list(values) for kind, values in (marker.ids or {}).items()}
    for kind, values in found.items().items():
        counts[kind] = max(counts.get(kind, 0), len(values))
        merged = list(dict.fromkeys([*ids.get(kind, []), *values]))
        if merged:
            ids[kind] = merged[:MAX_LISTED_IDS]
    marker.counts, marker.ids = counts, ids
    marker.fact_ids = sorted(set(marker.fact_ids or []) | set(found.fact_ids))
    marker.save(update_fields=["counts", "ids", "fact_ids"])


def _erase_rows(found: Plan) -> None:
    """What the files do not hold, in one transaction (rerun: it finds what is left)."""
    scope = found.scope
    ids = found.fact_ids
    with transaction.atomic():
        if connection.vendor == "sqlite":
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA secure_delete=ON")
        _delete_in(Candidate.objects.all(), "pk", found.candidates)
        _delete_in(ExtractedMessage.objects.all(), "pk", found.extracted_messages)
        _delete_in(Turn.objects.all(), "pk", found.turns)
        _delete_in(ExtractionRun.objects.all(), "pk", found.runs)
        _delete_in(FactRevision.objects.all(), "fact_id", ids)
        _delete_in(FactUsage.objects.all(), "fact_id", ids)
        _delete_in(FactCard.objects.all(), "id", ids)
        from memoryadmin.api_service import discard_usage

        # Counts buffered in this process are dropped; any other process's would find no
        # card to count (write_usage counts only cards in the mirror).
        discard_usage(ids)
        if found.profile:
            ProfileSection.objects.filter(user_id=scope.user_id).delete()
            ProfileRevision.objects.filter(user_id=scope.user_id).delete()
        else:
            _delete_in(ProfileRevision.objects.all(), "pk", found.profile_revisions)
        from retrieval.models import GoldenQuery

        _delete_in(GoldenQuery.objects.all(), "pk", found.golden_queries)
        if found.tasks:
            from django_tasks_db.models import DBTaskResult

            for chunk in _chunks(found.tasks):
                tasks = DBTaskResult.objects.filter(pk__in=chunk)
                # A running task's row is saved by its worker when it ends: deleting it
                # would crash that worker, so its arguments are blanked instead.
                tasks.filter(status="RUNNING").update(args_kwargs={"args": [], "kwargs": {}, "erased": True})
                tasks.exclude(status="RUNNING").delete()
        for chunk in _chunks(found.audit_events):
            for event in AuditEvent.objects.filter(pk__in=chunk):
                details = {k: v for k, v in (event.details or {}).items() if k in _AUDIT_ID_KEYS}
                details["erased"] = True
                event.reason = ""
                event.details = details
                event.save(update_fields=["reason", "details"])


def _remove_folder(store: Store, scope: Scope) -> None:
    """The user's folder (or one agent's), with what no card holds any more: shard
    folders, temp files of interrupted writes, hand-placed files. The lock file stays:
    removing a lock file another process may hold would let two processes lock
    different files."""
    if scope.thread_id or scope.project_id:
        return  # a conversation's cards were deleted one by one; the folder is shared
    with store.lock(Bucket(user_id=scope.user_id, agent_name=None)):
        folder = store.user_dir(scope.user_id)
        if scope.agent_name:
            folder = folder / "agents" / scope.agent_name
        if folder.exists():
            shutil.rmtree(folder)
            with contextlib.suppress(OSError):
                fd = os.open(folder.parent, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)


# --- the bytes ----------------------------------------------------------------------

_SQLITE_MAGIC = b"SQLite format 3\x00"


def sqlite_files(root: Path) -> list[Path]:
    """Every SQLite database file under `root` (their -wal/-shm go with them)."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if name.endswith(("-wal", "-shm", "-journal")):
                continue
            try:
                with open(path, "rb") as handle:
                    if handle.read(16) == _SQLITE_MAGIC:
                        found.append(path)
            except OSError:
                continue
    return sorted(found)


def scrub_sqlite(path: Path, *, timeout: float = 30.0) -> dict[str, Any]:
    """Leave no deleted byte in one SQLite file: merge every FTS5 table's segments (a
    deleted term stays in old segments until merged), VACUUM with secure_delete (free
    pages and the slack inside pages keep deleted rows), then checkpoint the WAL and
    truncate it (its frames keep old page images)."""
    started = time.monotonic()
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
        conn.execute("PRAGMA secure_delete=ON")
        conn.execute("PRAGMA temp_store=MEMORY")  # VACUUM's copy never touches a temp file
        fts = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND sql LIKE 'CREATE VIRTUAL TABLE%USING fts5%'"
            )
        ]
        for name in fts:
            quoted = '"' + name.replace('"', '""') + '"'
            conn.execute(f"INSERT INTO {quoted}({quoted}) VALUES('optimize')")
        conn.execute("VACUUM")
        busy = 1
        for _attempt in range(50):
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            if not busy:
                break
            time.sleep(0.1)  # a reader still holds an old snapshot
    finally:
        conn.close()
    return {
        "file": path.name,
        "fts_tables": len(fts),
        "wal_truncated": not busy,
        "s": round(time.monotonic() - started, 3),
    }


def _django_sqlite_file() -> Path | None:
    if connection.vendor != "sqlite":
        return None
    name = str(connection.settings_dict.get("NAME") or "")
    if not name or name == ":memory:" or name.startswith("file:") or "mode=memory" in name:
        return None
    path = Path(name)
    return path if path.exists() else None


def scrub_bytes(root: Path) -> list[dict[str, Any]]:
    """`scrub_sqlite` on every SQLite file under MEMORY_ROOT and on Django's SQLite DB.
    PostgreSQL keeps dead tuples until (auto)vacuum: see README "Erasure and export"."""
    done = []
    targets = sqlite_files(Path(root))
    db = _django_sqlite_file()
    if db is not None and db not in targets:
        targets.append(db)
    for path in targets:
        try:
            done.append(scrub_sqlite(path))
        except sqlite3.Error as exc:
            log.error("erasure: could not scrub %s: %s", path, exc)
            done.append({"file": path.name, "error": str(exc)})
    return done


def _checkpoint_django_db() -> None:
    """The audit event and the marker's end were written after the VACUUM: fold them
    into the main file too (they hold ids, no content)."""
    db = _django_sqlite_file()
    if db is None:
        return
    with contextlib.suppress(sqlite3.Error):
        conn = sqlite3.connect(db, timeout=30, isolation_level=None)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
