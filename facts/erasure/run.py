"""The erasure itself (`erase`): the durable marker first, then the cards and profile
through the write function under the buckets' locks, then every row the files do not
hold, the user's folder, the byte pass and one audit event with ids and counts. Every
step is idempotent, so a rerun finishes an erasure killed at any point.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from facts.erasure import extra
from facts.erasure.guard import bypass, user_barrier
from facts.erasure.plan import Plan, chunks, collect, delete_in
from facts.erasure.scope import Scope
from facts.erasure.scrub import checkpoint_django_db, scrub_bytes
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
from facts.storage.profilefile import Profile, Section
from facts.storage.store import Bucket, Store, get_store

# Ids listed per kind in the audit event and the dry run; the counts stay exact.
MAX_LISTED_IDS = 1000
FAILPOINT_ENV = "MEMORY_ERASE_FAILPOINT"

# Audit details that hold ids and numbers only; every other key (corrected content,
# keys, before/after) is dropped when an event names erased memory.
_AUDIT_ID_KEYS = frozenset(
    {"fact_id", "fact_ids", "revision", "to_revision", "deleted", "kind", "superseded", "project_id", "erased"}
)


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
        user_barrier(scope.user_id, exclusive=True)
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
    token = bypass.set(True)
    try:
        found = _erase_memory(scope, store, actor, marker)
        _failpoint("after_files")
        _erase_rows(found)
        _failpoint("after_rows")
        _remove_folder(store, scope)
    finally:
        bypass.reset(token)
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
    checkpoint_django_db()
    with contextlib.suppress(Exception):
        from django.core.cache import cache

        cache.clear()  # cached conflict lists hold card content
    return Report(marker.pk, scope, counts, resumed, scrubbed)


def _erase_memory(scope: Scope, store: Store, actor: str, marker: Erasure) -> Plan:
    """Cards and profile through the write function, under the locks of every bucket.

    The user's and the projects' locks are taken in one call (the store orders them,
    as every writer does); should the files name a project not locked yet, again with it.
    """
    from facts.storage import hooks, writer

    user_bucket = Bucket(user_id=scope.user_id, agent_name=None)
    project_buckets: set[Bucket] = set()
    while True:
        with store.lock(user_bucket, *project_buckets):
            marker.refresh_from_db()
            found = collect(scope, store, known=marker.fact_ids)
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
            # the file and its mirror row): mirror, history and index entries. And the
            # index entries of cards a previous run deleted, file and row, but was killed
            # before the index heard of it (`known`: only the marker remembers them).
            delete_in(FactCard.objects.all(), "id", found.mirror_only)
            if gone := [*found.mirror_only, *found.known]:
                # Only the id is read by the index's listener: a card without the rest.
                hooks.cards_changed([], [Card.model_construct(id=i) for i in gone])  # type: ignore[call-arg]
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
        delete_in(Candidate.objects.all(), "pk", found.candidates)
        delete_in(ExtractedMessage.objects.all(), "pk", found.extracted_messages)
        delete_in(Turn.objects.all(), "pk", found.turns)
        delete_in(ExtractionRun.objects.all(), "pk", found.runs)
        delete_in(FactRevision.objects.all(), "fact_id", ids)
        delete_in(FactUsage.objects.all(), "fact_id", ids)
        delete_in(InjectedFact.objects.all(), "pk", found.injected_facts)
        delete_in(Injection.objects.all(), "pk", found.injections)  # their lines cascade
        delete_in(FactCard.objects.all(), "id", ids)
        # Usage counts still buffered in an API process find no card to count when they
        # are flushed (write_usage counts only cards in the mirror): nothing comes back.
        if found.profile:
            ProfileSection.objects.filter(user_id=scope.user_id).delete()
            ProfileRevision.objects.filter(user_id=scope.user_id).delete()
        else:
            delete_in(ProfileRevision.objects.all(), "pk", found.profile_revisions)
        for rows in extra.registered():  # the read side's golden queries
            rows.delete(found.extra.get(rows.kind, []))
        if found.tasks:
            from django_tasks_db.models import DBTaskResult

            for chunk in chunks(found.tasks):
                tasks = DBTaskResult.objects.filter(pk__in=chunk)
                # A running task's row is saved by its worker when it ends: deleting it
                # would crash that worker, so its arguments are blanked instead.
                tasks.filter(status="RUNNING").update(args_kwargs={"args": [], "kwargs": {}, "erased": True})
                tasks.exclude(status="RUNNING").delete()
        for chunk in chunks(found.audit_events):
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
