"""The dry run: everything an erasure of a scope removes, found by reading the files (the
truth) and the rows, changing nothing. The erasure collects the same plan under the
locks, so the dry run lists exactly what `erase` deletes. Also the chunked `__in`
helpers both use (SQLite's parameter limit).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet

from facts.erasure import extra
from facts.erasure.scope import Scope
from facts.models import (
    AuditEvent,
    Candidate,
    Erasure,
    ExtractedMessage,
    ExtractionRun,
    FactCard,
    FactRevision,
    FactUsage,
    InjectedFact,
    Injection,
    ProfileRevision,
    ProfileSection,
    Turn,
)
from facts.storage.cardfile import Card
from facts.storage.errors import CardParseError
from facts.storage.store import Bucket, Store, get_store

PROCESS_TASK = "facts.tasks.process_thread_task"


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
    injections: list[int] = field(default_factory=list)  # injection log entries of the scope
    injected_facts: list[int] = field(default_factory=list)  # other entries' lines naming its cards
    # Rows other apps keep (`facts.erasure.extra`), by kind: the read side's "golden_queries".
    extra: dict[str, list[int]] = field(default_factory=dict)
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
            "injection_log_entries": sorted(self.injections),
            "injection_log_cards": sorted(self.injected_facts),
            "turns": sorted(self.turns),
            "extraction_runs": sorted(self.runs),
            "candidates": sorted(self.candidates),
            "extracted_message_ids": sorted(self.extracted_messages),
            **{kind: sorted(keys) for kind, keys in self.extra.items()},
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
    return collect(scope, store or get_store(), known=marker.fact_ids if marker else ())


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


def collect(scope: Scope, store: Store, known: Iterable[str] = ()) -> Plan:
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
    # The log has no thread: a thread's erasure removes the lines naming its cards; a
    # user's, agent's or project's removes their whole entries.
    if not scope.thread_id:
        out.injections = list(Injection.objects.filter(scope.rows()).values_list("pk", flat=True))
    gone = set(out.injections)
    lines: list[tuple[int, int]] = []
    for chunk in chunks(fact_ids):
        lines += InjectedFact.objects.filter(fact_id__in=chunk).values_list("pk", "injection_id")
    out.injected_facts = [pk for pk, injection in lines if injection not in gone]
    out.extra = {rows.kind: rows.find(scope, set(fact_ids)) for rows in extra.registered()}
    out.tasks = [str(pk) for pk in _tasks(scope)]
    events = AuditEvent.objects.exclude(action=AuditEvent.Action.ERASE).exclude(reason="", details__erased=True)
    targets = fact_ids + [f"candidate:{pk}" for pk in out.candidates]
    found = set(_values_in(events, "target", targets, "pk"))
    if scope.whole_user:
        found |= set(events.filter(user_id=scope.user_id).values_list("pk", flat=True))
    out.audit_events = sorted(found)
    return out


CHUNK = 500


def chunks(values: Sequence[Any]) -> Iterator[list[Any]]:
    values = list(values)
    for start in range(0, len(values), CHUNK):
        yield values[start : start + CHUNK]


def _values_in(query: QuerySet, field_name: str, values: Sequence[Any], column: str) -> list[Any]:
    out: list[Any] = []
    for chunk in chunks(values):
        out += query.filter(**{f"{field_name}__in": chunk}).values_list(column, flat=True)
    return out


def delete_in(query: QuerySet, field_name: str, values: Sequence[Any]) -> None:
    for chunk in chunks(values):
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
