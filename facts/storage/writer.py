"""The single write function: lock → write file atomically → update mirror → update index.

Every change to memory (extraction, review, dashboard edits, imports, erasure) goes
through `commit`: cards (`Put`, `Delete`) and profiles (`PutProfile`, `DeleteProfile`)
alike, in one batch if need be. `update_card` and `commit_profile` are its
read-modify-write helpers. A change made only to the DB or only to the index is lost
at the next rebuild, by design.

The index is told about changes through the hooks in `facts.storage.hooks`; this module never
imports the read side. Profiles are not indexed, so no listener hears of them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import transaction

from facts.erasure.guard import refuse_cards, refuse_profile
from facts.models import CardChange, FactCard, FactRevision, ProfileRevision, ProfileSection
from facts.storage import bulk, hooks
from facts.storage.atomic import atomic_write_many, remove_file
from facts.storage.cardfile import Card, dump_card, file_digest, now_utc
from facts.storage.errors import CardTooLarge, InvalidId, RevisionConflict
from facts.storage.fileread import too_large
from facts.storage.ids import normalize_agent
from facts.storage.profilefile import Profile, dump_profile
from facts.storage.store import Bucket, Store, get_store

log = logging.getLogger(__name__)

_MIRROR_FIELDS = [
    "key", "category", "status", "confidence", "user_id", "agent_name", "project_id", "content",
    "created_at", "updated_at", "last_confirmed_at", "confirmation_count", "expires_at",
    "review_by", "superseded_by", "source_kind", "source_run_id", "source_thread_id",
    "source_message_id", "evidence_text", "revision", "path", "file_sha256",
]  # fmt: skip


@dataclass
class Put:
    """Write `card`. `expected_revision`: the revision the caller read (None = the card
    must not exist yet; -1 = do not check). `reason`: this card's own entry in the
    history, instead of the batch's (a batch of several runs names each card's run)."""

    card: Card
    expected_revision: int | None = None
    reason: str = ""


@dataclass
class Delete:
    card: Card
    expected_revision: int | None = -1


@dataclass
class PutProfile:
    """Write `profile` as its user's memory.json (at most one profile op per user in a
    batch). `expected_revision`: the revision the caller read (a missing memory.json is
    revision 0; None = none may exist yet; -1 = do not check). The written document
    gets the next revision, unless `restore`: then it keeps its own revision and
    `updated_at` (an import bringing back an exported memory.json as it was)."""

    profile: Profile
    expected_revision: int | None = -1
    restore: bool = False


@dataclass
class DeleteProfile:
    """Remove the user's memory.json and its mirror rows (erasure; `facts.erasure`
    removes the revisions)."""

    user_id: str


Op = Put | Delete | PutProfile | DeleteProfile


@dataclass
class CommitResult:
    written: list[Card] = field(default_factory=list)
    deleted: list[Card] = field(default_factory=list)
    profiles: list[Profile] = field(default_factory=list)
    profiles_deleted: list[str] = field(default_factory=list)


@dataclass
class _Mirror:
    """What reached the disk, for the mirror: filled as files land, applied once."""

    rows: list[FactCard] = field(default_factory=list)
    revisions: list[FactRevision] = field(default_factory=list)
    deleted: list[Card] = field(default_factory=list)
    profiles: list[tuple[Profile, str, str, bool]] = field(default_factory=list)  # profile, path, text, restore
    profiles_deleted: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.rows or self.deleted or self.profiles or self.profiles_deleted)

    def apply(self, *, actor: str, reason: str) -> None:
        upsert_mirror(self.rows)
        if self.deleted:
            FactCard.objects.filter(id__in=[c.id for c in self.deleted]).delete()
        bulk.insert(FactRevision, self.revisions, ignore_conflicts=True)
        if settings.MEMORY_CHANGE_LOG and (self.rows or self.deleted):
            # Other machines' indexes follow this log (retrieval.follow).
            ids = [row.id for row in self.rows] + [c.id for c in self.deleted]
            CardChange.objects.bulk_create([CardChange(fact_id=fact_id) for fact_id in ids])
        for profile, path, text, restore in self.profiles:
            mirror_profile(profile, path, file_digest(text))
            # A restore may have brought this revision's row back already (with its
            # original actor): that row is kept.
            ProfileRevision.objects.bulk_create(
                [
                    ProfileRevision(
                        user_id=profile.user_id,
                        revision=profile.revision,
                        document=profile.model_dump(mode="json"),
                        actor=actor,
                        reason=reason,
                    )
                ],
                ignore_conflicts=restore,
            )
        if self.profiles_deleted:
            ProfileSection.objects.filter(user_id__in=self.profiles_deleted).delete()


def mirror_row(card: Card, path: str, digest: str) -> FactCard:
    return FactCard(
        id=card.id,
        key=card.key,
        category=card.category.value,
        status=card.status.value,
        confidence=card.confidence,
        user_id=card.user_id or "",
        agent_name=(card.agent_name or "") if card.user_id is not None else "",
        project_id=card.project_id or "",
        content=card.content,
        created_at=card.created_at,
        updated_at=card.updated_at,
        last_confirmed_at=card.last_confirmed_at,
        confirmation_count=card.confirmation_count,
        expires_at=card.expires_at,
        review_by=card.review_by,
        superseded_by=card.superseded_by or "",
        source_kind=card.source.kind.value,
        source_run_id=card.source.run_id or "",
        source_thread_id=card.source.thread_id or "",
        source_message_id=card.source.message_id or "",
        evidence_text=card.source.evidence_text or "",
        revision=card.revision,
        path=path,
        file_sha256=digest,
    )


def upsert_mirror(rows: Sequence[FactCard]) -> None:
    # One row per card, the last state winning: PostgreSQL refuses an upsert that names
    # the same id twice ("ON CONFLICT DO UPDATE command cannot affect row a second time").
    rows = list({row.id: row for row in rows}.values())
    if rows:
        bulk.insert(FactCard, rows, update_conflicts=_MIRROR_FIELDS, unique_fields=["id"])


def _normalize(card: Card) -> Card:
    """Agent names are stored normalized so every reader agrees on the bucket."""
    if card.user_id is not None:
        agent = normalize_agent(card.agent_name)
        if agent != card.agent_name:
            card = card.model_copy(update={"agent_name": agent})
        if card.project_id is not None:
            card = card.model_copy(update={"project_id": None})
    elif not card.project_id:
        raise InvalidId("a card needs a user_id or a project_id")
    return card


def commit(
    ops: Iterable[Op],
    *,
    actor: str,
    reason: str = "",
    store: Store | None = None,
    record: Callable[[], None] | None = None,
) -> CommitResult:
    """Apply a batch of card and profile writes and deletions.

    Files are written under the locks of every bucket involved (a profile's is its
    user's); the mirror and the index are then updated once for the whole batch (that
    batching is what makes thousands of fsynced writes a second possible).

    `record`: the caller's own database writes that belong with this batch (a run's
    candidates, its turns marked done). They run in the transaction of the mirror
    rows, once every file is durable; should any write fail they do not run (nothing
    claims a card that is not on disk), and should they fail that transaction is
    rolled back; either way the files that did reach the disk are mirrored on their own.
    """
    store = store or get_store()
    ops = list(ops)
    if not ops:
        if record is not None:
            with transaction.atomic():
                record()
        return CommitResult()
    ops = [dataclasses.replace(op, card=_normalize(op.card)) if isinstance(op, Put | Delete) else op for op in ops]
    card_ops = [op for op in ops if isinstance(op, Put | Delete)]
    profile_ops = [op for op in ops if isinstance(op, PutProfile | DeleteProfile)]
    buckets = {Bucket.of(op.card) for op in card_ops} | {Bucket(user_id=_profile_user(op)) for op in profile_ops}
    result = CommitResult()
    landed = _Mirror()
    mirrored = False
    with store.lock(*buckets), store.commit_gate():
        # A user being erased gets no new card or profile (checked under the locks the
        # erasure takes, so a write either lands before the erasure reads the folder or
        # not at all).
        refuse_cards([op.card for op in card_ops if isinstance(op, Put)])
        for profile_op in profile_ops:
            if isinstance(profile_op, PutProfile):
                refuse_profile(profile_op.profile.user_id)
        # Every revision is checked before the first file is written: a conflict on the
        # third card of a batch must not leave the first two written behind the
        # mirror's back.
        planned: list[tuple[Put | Delete, Path, Card | None, Card | None]] = []
        texts: list[str | None] = []  # each planned card's file text
        pending: dict[str, Card | None] = {}  # a card named twice in one batch sees its first op
        for op in card_ops:
            path = store.card_path(op.card)
            if op.card.id in pending:
                current = pending[op.card.id]
            else:
                current = store.read_card_at(path) if path.exists() else None
            _check_revision(op, current)
            card = None
            if isinstance(op, Put):
                card = op.card
                if current is not None:
                    card = card.model_copy(update={"revision": current.revision + 1})
            pending[op.card.id] = card
            planned.append((op, path, current, card))
            # The size bound (`facts.storage.fileread`), before the first file is written too:
            # a card too large to read back is never written.
            text = dump_card(card) if card is not None else None
            if text is not None and (problem := too_large(len(text.encode("utf-8")))):
                raise CardTooLarge(path, f"{op.card.id}: {problem}")
            texts.append(text)
        profile_puts = [_plan_profile(op, store) for op in profile_ops if isinstance(op, PutProfile)]
        try:
            for op, _path, current, card in planned:
                if card is None and current is not None:
                    store.delete_card(op.card)
                    result.deleted.append(current)
                    landed.deleted.append(current)
            for profile_op in profile_ops:
                if isinstance(profile_op, DeleteProfile):
                    if remove_file(store.profile_path(profile_op.user_id)):
                        result.profiles_deleted.append(profile_op.user_id)
                    landed.profiles_deleted.append(profile_op.user_id)  # rows go even when the file had gone
            puts = [
                (path, card, text, op.reason or reason)
                for (op, path, _current, card), text in zip(planned, texts, strict=True)
                if isinstance(op, Put) and card is not None and text is not None
            ]

            # The index listeners tokenize while the disk works on the files. The
            # caller's records, the mirror rows and the history then go in one short
            # transaction, once every file is durable: opened after the wait, not
            # before it, because on SQLite an open write transaction holds the database's
            # write lock, and turns arriving from the web must not queue behind a batch
            # of fsyncs. Should a write fail, nothing is recorded and what did land is
            # mirrored on its own (below).
            failures: list[BaseException] = []

            def while_writing() -> None:
                try:
                    hooks.cards_writing([card for _path, card, _text, _reason in puts])
                except BaseException as exc:
                    failures.append(exc)  # raised once the files that landed are known

            files = [(path, text) for path, _card, text, _why in puts] + [
                (p, text) for p, _pr, text, _r in profile_puts
            ]
            errors = atomic_write_many(files, while_waiting=while_writing)
            for (path, card, text, why), error in zip(puts, errors[: len(puts)], strict=True):
                if error is not None:
                    failures.append(error)
                    continue
                result.written.append(card)
                landed.rows.append(mirror_row(card, store.relative(path), file_digest(text)))
                landed.revisions.append(
                    FactRevision(fact_id=card.id, revision=card.revision, text=text, actor=actor, reason=why)
                )
            for (path, profile, text, restore), error in zip(profile_puts, errors[len(puts) :], strict=True):
                if error is not None:
                    failures.append(error)
                    continue
                result.profiles.append(profile)
                landed.profiles.append((profile, store.relative(path), text, restore))
            if failures:
                raise failures[0]
            # Mirror and index are updated while the lock is still held, so two writers
            # can never leave the mirror in the older writer's state.
            with transaction.atomic():
                if record is not None:
                    record()
                landed.apply(actor=actor, reason=reason)
            mirrored = True
        finally:
            if not landed.empty and not mirrored:
                # A file write failed half-way (disk full) or the caller's records did:
                # the files already written still reach mirror and index.
                with transaction.atomic():
                    landed.apply(actor=actor, reason=reason)
            if result.written or result.deleted:
                hooks.cards_changed(result.written, result.deleted)
    return result


def _profile_user(op: PutProfile | DeleteProfile) -> str:
    return op.user_id if isinstance(op, DeleteProfile) else op.profile.user_id


def _plan_profile(op: PutProfile, store: Store) -> tuple[Path, Profile, str, bool]:
    """The checked profile of `op` with its revision, and its file's text."""
    user_id = op.profile.user_id
    path = store.profile_path(user_id)
    current = store.read_profile_at(path) if path.exists() else None
    expected = op.expected_revision
    if expected is None and current is not None:
        raise RevisionConflict(f"profile of {user_id} already exists; a restore needs an empty place")
    now_at = 0 if current is None else current.revision
    if expected is not None and expected != -1 and now_at != expected:
        raise RevisionConflict(f"profile of {user_id} is at revision {now_at}, expected {expected}")
    revision = max(op.profile.revision, 1) if op.restore else now_at + 1
    profile = op.profile.model_copy(update={"revision": revision})
    text = dump_profile(profile)
    # The same bound every reader keeps: a profile too large to read back is never written.
    if problem := too_large(len(text.encode("utf-8")), what="profile"):
        raise CardTooLarge(path, f"profile of {user_id}: {problem}")
    return path, profile, text, op.restore


def _check_revision(op: Put | Delete, current: Card | None) -> None:
    expected = op.expected_revision
    if expected == -1:
        return
    if expected is None:
        if current is not None:
            raise RevisionConflict(f"{op.card.id} already exists")
        return
    if current is None:
        raise RevisionConflict(f"{op.card.id} does not exist any more")
    if current.revision != expected:
        raise RevisionConflict(f"{op.card.id} is at revision {current.revision}, expected {expected}")


def save_card(card: Card, *, actor: str, reason: str = "", expected_revision: int | None = -1) -> Card:
    return commit([Put(card, expected_revision)], actor=actor, reason=reason).written[0]


def update_card(
    bucket: Bucket,
    fact_id: str,
    change: Callable[[Card], Card],
    *,
    actor: str,
    reason: str = "",
    expected_revision: int | None = None,
    store: Store | None = None,
) -> Card:
    """Read-modify-write of one card under its lock: no update can be lost.

    `expected_revision`: the revision the caller showed someone (a form); a card that has
    moved on since is refused rather than changed on top of what they never saw."""
    store = store or get_store()
    with store.lock(bucket):
        current = store.read_card(bucket, fact_id)
        if current is None:
            raise RevisionConflict(f"{fact_id} does not exist")
        if expected_revision is not None and current.revision != expected_revision:
            raise RevisionConflict(
                f"the fact changed since you opened it (revision {expected_revision}, now {current.revision}); "
                "reload it and apply your correction again"
            )
        updated = change(current.model_copy(deep=True))
        updated = updated.model_copy(update={"updated_at": now_utc()}) if updated != current else updated
        if updated == current:
            return current
        result = commit([Put(updated, current.revision)], actor=actor, reason=reason, store=store)
        return result.written[0]


def delete_card(card: Card, *, actor: str, reason: str = "", store: Store | None = None) -> bool:
    result = commit([Delete(card)], actor=actor, reason=reason, store=store)
    return bool(result.deleted)


# --- profiles ---------------------------------------------------------------------


def profile_rows(profile: Profile, path: str, digest: str) -> list[ProfileSection]:
    rows = []
    for group_name in ("user", "history"):
        group = getattr(profile, group_name)
        for name in type(group).model_fields:
            section = getattr(group, name)
            rows.append(
                ProfileSection(
                    user_id=profile.user_id,
                    group=group_name,
                    name=name,
                    summary=section.summary,
                    updated_at=section.updated_at,
                    source=section.source.model_dump(mode="json") if section.source else None,
                    revision=profile.revision,
                    path=path,
                    file_sha256=digest,
                )
            )
    return rows


_SECTION_FIELDS = [f.name for f in ProfileSection._meta.concrete_fields if f.name not in {"id", "user_id", "name"}]


def mirror_profile(profile: Profile, path: str, digest: str) -> None:
    """The profile's rows, as an upsert: two transactions mirroring the same profile at
    once (a commit and a rebuild's catch-up) must not both insert a section — with a
    delete-then-insert, PostgreSQL raised a unique violation (found by
    tests/test_concurrency_web.py)."""
    rows = profile_rows(profile, path, digest)
    ProfileSection.objects.filter(user_id=profile.user_id).exclude(name__in=[r.name for r in rows]).delete()
    ProfileSection.objects.bulk_create(
        rows, update_conflicts=True, unique_fields=["user_id", "name"], update_fields=_SECTION_FIELDS
    )


def commit_profile(
    user_id: str,
    change: Callable[[Profile], Profile],
    *,
    actor: str,
    reason: str = "",
    expected_revision: int | None = None,
    store: Store | None = None,
    restore: bool = False,
) -> Profile:
    """Read-modify-write of a user's memory.json under the user's lock, written by `commit`.

    `restore`: the document `change` returns is written with its own revision and
    `updated_at` (an import bringing back an exported memory.json as it was); only
    allowed where the user has no memory.json yet."""
    store = store or get_store()
    with store.lock(Bucket(user_id=user_id, agent_name=None)):
        # Refused before `change` runs: a user being erased is told so even when the
        # change would turn out to be none.
        refuse_profile(user_id)
        current = store.read_profile(user_id)
        if expected_revision is not None and current.revision != expected_revision:
            raise RevisionConflict(
                f"profile of {user_id} is at revision {current.revision}, expected {expected_revision}"
            )
        if restore and store.profile_path(user_id).exists():
            raise RevisionConflict(f"profile of {user_id} already exists; a restore needs an empty place")
        updated = change(current.model_copy(deep=True))
        if updated == current:
            return current
        if restore:
            op = PutProfile(updated.model_copy(update={"user_id": user_id}), expected_revision=None, restore=True)
        else:
            updated = updated.model_copy(update={"updated_at": now_utc(), "user_id": user_id})
            op = PutProfile(updated, expected_revision=current.revision)
        return commit([op], actor=actor, reason=reason, store=store).profiles[0]


def delete_profile(user_id: str, *, store: Store | None = None) -> bool:
    """Remove a user's memory.json and its mirror rows (erasure; `facts.erasure` removes
    the revisions). Whether there was a file to remove."""
    result = commit([DeleteProfile(user_id)], actor="erasure", reason="erasure", store=store)
    return bool(result.profiles_deleted)
