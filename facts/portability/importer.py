"""Restoring an archive into a store where its user has no memory: the archive is read
and checked whole first (`facts.portability.unpack`), then the target (no memory of the
user, no taken ids), before the first write; then cards, rows and profile go through
`facts.storage.writer`. A refused archive (`ImportRefused`) changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from django.core.management.color import no_style
from django.db import connection, models

from facts.models import (
    AuditEvent,
    FactCard,
    FactUsage,
    ProfileSection,
    Turn,
)
from facts.portability.archive import (
    Kind,
    chunks,
    files_under,
    history_kinds,
)
from facts.portability.unpack import Archive, ImportRefused, read_archive
from facts.storage import writer
from facts.storage.cardfile import Card
from facts.storage.store import Store, get_store


@dataclass
class ImportSummary:
    user_id: str
    restored: dict[str, int]
    skipped: dict[str, int]


def _user_has_memory(store: Store, user_id: str) -> str | None:
    cards = sum(1 for _ in files_under(store.user_dir(user_id) / "agents"))
    profile = store.profile_path(user_id).is_file()
    if cards or profile:
        what = f"{cards} card file(s)" + (" and a memory.json" if profile else "")
        return f"{what} under {store.relative(store.user_dir(user_id))}/"
    rows = FactCard.objects.filter(user_id=user_id).count() + ProfileSection.objects.filter(user_id=user_id).count()
    if rows:
        return f"{rows} mirror row(s) without files (run `manage.py reindex` first)"
    return None


def _plan(archive: Archive, store: Store, *, history: bool) -> tuple[list[tuple[str, Card, bytes]], dict[str, int]]:
    """Check the target; returns the project cards to write and what is skipped."""
    user_id = archive.user_id
    held = _user_has_memory(store, user_id)
    if held:
        raise ImportRefused(
            f"user {user_id!r} already has memory here: {held}. Import only restores into an empty place."
        )
    skipped: dict[str, int] = {}
    projects: list[tuple[str, Card, bytes]] = []
    for name, card, data in archive.project_cards:
        path = store.root / name
        if path.exists():
            if path.read_bytes() != data:
                raise ImportRefused(f"{name} exists here with other content")
            skipped["project_cards"] = skipped.get("project_cards", 0) + 1
            continue
        projects.append((name, card, data))
    ids = [card.id for _, card, _ in archive.cards + projects]
    taken = [
        fact_id
        for chunk in chunks(ids)
        for fact_id in FactCard.objects.filter(id__in=chunk).values_list("id", flat=True)
    ]
    if taken:
        raise ImportRefused(f"fact id(s) already used here by other cards: {', '.join(taken[:5])}")
    if history:
        for kind in history_kinds():
            if not kind.keep_ids or kind.natural_key:
                continue
            pks = [obj.pk for obj in archive.rows.get(kind.name, [])]
            manager = kind.model._default_manager
            clash = [
                str(pk) for chunk in chunks(pks) for pk in manager.filter(pk__in=chunk).values_list("pk", flat=True)
            ]
            if clash:
                raise ImportRefused(
                    f"{kind.name} id(s) {', '.join(clash[:5])} are already used in this database; "
                    "import with --skip-history to restore the cards and the profile only"
                )
    return projects, skipped


def _existing_keys(kind: Kind, objs: list[models.Model]) -> set[tuple[Any, ...]]:
    if not objs:
        return set()
    first = kind.natural_key[0]
    values = sorted({getattr(obj, first) for obj in objs})
    manager = kind.model._default_manager
    return {
        tuple(row)
        for chunk in chunks(values)
        for row in manager.filter(**{f"{first}__in": chunk}).values_list(*kind.natural_key)
    }


def _restore_rows(archive: Archive, skipped: dict[str, int]) -> Callable[[], None]:
    def record() -> None:
        for kind in history_kinds():
            objs = archive.rows.get(kind.name, [])
            if kind.natural_key:
                existing = _existing_keys(kind, objs)
                fresh = [o for o in objs if tuple(getattr(o, n) for n in kind.natural_key) not in existing]
                if len(fresh) != len(objs):
                    skipped[kind.name] = len(objs) - len(fresh)
                objs = fresh
            for obj in objs:
                # raw: the rows keep their own timestamps (auto_now_add would stamp now),
                # as `loaddata` does.
                obj.save_base(raw=True, force_insert=True)
        # Rows inserted with their own ids leave PostgreSQL's sequences behind them.
        statements = connection.ops.sequence_reset_sql(
            no_style(), [k.model for k in history_kinds() if k.keep_ids and k.model is not FactUsage]
        )
        with connection.cursor() as cursor:
            for sql in statements:
                cursor.execute(sql)

    return record


def _queue_pending(turns: list[models.Model]) -> None:
    """The worker task of every thread with a restored pending turn: no pending turn
    waits for nobody. Enqueued once the rows are committed and the store's locks let go
    (a backend that runs tasks at once would otherwise wait for locks this import holds)."""
    from facts.tasks import schedule

    threads = sorted(
        {(t.user_id, t.agent_name, t.thread_id) for t in turns if t.status == Turn.Status.PENDING}  # type: ignore[attr-defined]
    )
    for user_id, agent_name, thread_id in threads:
        schedule(user_id, agent_name, thread_id, at=None)


def import_archive(
    source: str | Path | IO[bytes],
    *,
    actor: str,
    history: bool = True,
    check_only: bool = False,
    store: Store | None = None,
) -> ImportSummary:
    """Restore an archive made by `export_user` into a store where its user has no memory.

    Everything is validated before the first write (ImportRefused: nothing changed).
    Cards go through `writer.commit` (one batch; the history rows commit in the same
    transaction as their mirror rows), then the profile through `writer.commit_profile`.
    `history=False` restores the cards and the profile only; `check_only` stops after
    the checks.
    """
    store = store or get_store()
    archive = read_archive(source)
    if not history:
        archive.rows = {}
    projects, skipped = _plan(archive, store, history=history)
    restored = archive.counts()
    restored["project_cards"] = len(projects)
    if check_only:
        return ImportSummary(archive.user_id, restored, skipped)
    skipped_projects = skipped.pop("project_cards", 0)
    puts = [writer.Put(card, expected_revision=None) for _, card, _ in archive.cards + projects]
    reason = f"import of an export made {archive.manifest.get('created_at', '?')}"
    writer.commit(puts, actor=actor, reason=reason, store=store, record=_restore_rows(archive, skipped))
    _queue_pending(archive.rows.get("turns", []))
    if archive.profile is not None:
        profile = archive.profile
        writer.commit_profile(
            archive.user_id, lambda _current: profile, actor=actor, reason=reason, store=store, restore=True
        )
    for name, count in skipped.items():
        restored[name] -= count
    if skipped_projects:
        skipped["project_cards"] = skipped_projects
    AuditEvent.objects.create(
        actor=actor,
        action=AuditEvent.Action.IMPORT,
        user_id=archive.user_id,
        target=archive.user_id,
        details={"restored": restored, "skipped": skipped},
    )
    return ImportSummary(archive.user_id, restored, skipped)
