"""A curator's changes to one card (correct, expire, restore, review-by, revert, delete
for good) and the resolution of a conflict between cards.

Each function takes the card's mirror row (`FactCard`: where the card lives), the actor
and the request's data; it changes the file through `facts.storage.writer` (a read-modify-write
under the bucket's lock, so no update is lost), then records one `AuditEvent`. Errors
are raised, nothing is half done: `RevisionConflict` (the card moved on or is gone),
`CardParseError`, `InvalidId`, `ValueError` (a value the card format refuses).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from facts import audit
from facts.enums import CardStatus, Category
from facts.models import AuditEvent, FactCard, FactRevision
from facts.storage import writer
from facts.storage.cardfile import Card, now_utc, parse_card
from facts.storage.store import get_store


class UnknownRevision(LookupError):
    """The card has no stored revision of that number."""


def _change(
    row: FactCard,
    change: Callable[[Card], Card],
    *,
    actor: str,
    action: str,
    reason: str,
    expected_revision: int | None = None,
    **details: Any,
) -> Card:
    """Write `change` of the card `row` names, then audit it as `action`."""
    card = writer.update_card(
        row.bucket, row.id, change, actor=actor, reason=reason, expected_revision=expected_revision
    )
    audit.record(
        actor,
        action,
        target=row.id,
        user_id=row.user_id,
        agent_name=row.agent_name,
        reason=reason,
        revision=card.revision,
        **details,
    )
    return card


def correct(
    row: FactCard,
    *,
    actor: str,
    reason: str,
    content: str,
    key: str,
    category: str,
    confidence: float,
    expected_revision: int | None = None,
) -> Card:
    """New words, key, category or confidence for a card; refused when the card is no
    longer at `expected_revision` (the revision the curator's form showed)."""

    def change(card: Card) -> Card:
        update = {"content": content, "key": key, "category": Category(category), "confidence": confidence}
        return card.model_copy(update=update)

    return _change(
        row, change, actor=actor, action=AuditEvent.Action.CORRECT, reason=reason, expected_revision=expected_revision
    )


@dataclass(frozen=True)
class Expired:
    card: Card
    when: str  # "now", or the ISO moment it will expire


def expire(row: FactCard, *, actor: str, reason: str, at: datetime | None = None) -> Expired:
    """Expire a card now (`at` None or past: status expired, `expires_at` that moment),
    or set the moment it will expire (`at` in the future: still active until then).
    A naive `at` is taken as UTC. Never deletes: the card stays browsable and can be
    restored."""
    now = now_utc()
    if at is not None and at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    later = at if at is not None and at > now else None

    def change(card: Card) -> Card:
        if later is None:
            return card.model_copy(update={"status": CardStatus.EXPIRED, "expires_at": at or now})
        return card.model_copy(update={"expires_at": later})

    when = "now" if later is None else later.isoformat()
    card = _change(row, change, actor=actor, action=AuditEvent.Action.EXPIRE, reason=reason, at=when)
    return Expired(card, when)


def restore(row: FactCard, *, actor: str, reason: str) -> Card:
    """An expired or superseded card becomes active again (no expiry, no successor)."""

    def change(card: Card) -> Card:
        return card.model_copy(update={"status": CardStatus.ACTIVE, "expires_at": None, "superseded_by": None})

    return _change(row, change, actor=actor, action=AuditEvent.Action.RESTORE, reason=reason)


def set_review_by(row: FactCard, *, actor: str, reason: str, day: date | None) -> Card:
    """The day a curator should look at the card again (midnight UTC), or none."""
    at = datetime(day.year, day.month, day.day, tzinfo=UTC) if day else None

    def change(card: Card) -> Card:
        return card.model_copy(update={"review_by": at})

    return _change(
        row,
        change,
        actor=actor,
        action=AuditEvent.Action.REVIEW_BY,
        reason=reason,
        review_by=day.isoformat() if day else None,
    )


def card_at_revision(row: FactCard, revision: int) -> Card:
    """The card as its stored revision `revision` had it: `UnknownRevision` when there
    is none, `CardParseError` when its text does not read as a card."""
    old = FactRevision.objects.filter(fact_id=row.id, revision=revision).first()
    if old is None:
        raise UnknownRevision(f"{row.id} has no revision {revision}")
    return parse_card(old.text, Path(row.path))


def revert(row: FactCard, revision: int, *, actor: str, reason: str) -> Card:
    """Bring back what revision `revision` said, written as a new revision (the history
    keeps both); the card keeps its id, creation time and revision count."""
    target = card_at_revision(row, revision)

    def change(card: Card) -> Card:
        keep = {"id": card.id, "revision": card.revision, "created_at": card.created_at, "updated_at": card.updated_at}
        return target.model_copy(update=keep)

    return _change(row, change, actor=actor, action=AuditEvent.Action.REVERT, reason=reason, to_revision=revision)


def delete_for_good(rows: Sequence[FactCard], *, actor: str, reason: str) -> int:
    """Delete cards for good: files, mirror rows and their stored revisions (the text).
    A mirror row without a file (drift) goes too. The audit keeps that it happened and
    where, never the content. Returns how many cards went."""
    store = get_store()
    ops: list[writer.Op] = []
    for row in rows:
        card = store.read_card(row.bucket, row.id)
        if card is not None:
            ops.append(writer.Delete(card))
    result = writer.commit(ops, actor=actor, reason=reason)
    ids = [row.id for row in rows]
    FactRevision.objects.filter(fact_id__in=ids).delete()
    FactCard.objects.filter(id__in=ids).delete()
    for row in rows:
        audit.record(
            actor,
            AuditEvent.Action.DELETE,
            target=row.id,
            user_id=row.user_id,
            agent_name=row.agent_name,
            reason=reason,
            project_id=row.project_id,
            key=row.key,
        )
    return max(len(result.deleted), len(ids))


def resolve_conflict(keep: FactCard, others: Iterable[FactCard], *, actor: str, reason: str) -> int:
    """Keep one card; the live ones among `others` are superseded by it (their history
    stays browsable). One commit: a revision conflict changes nothing. Audited as one
    resolve. Returns how many cards were superseded."""
    others = list(others)
    if any(row.bucket != keep.bucket for row in others):
        raise ValueError("cards of another scope")
    store = get_store()
    puts: list[writer.Op] = []
    for row in others:
        card = store.read_card(row.bucket, row.id)
        if card is not None and card.status == CardStatus.ACTIVE:
            updated = card.model_copy(
                update={"status": CardStatus.SUPERSEDED, "superseded_by": keep.id, "updated_at": now_utc()}
            )
            puts.append(writer.Put(updated, card.revision))
    writer.commit(puts, actor=actor, reason=reason)
    audit.record(
        actor,
        AuditEvent.Action.RESOLVE,
        target=keep.id,
        user_id=keep.user_id,
        agent_name=keep.agent_name,
        reason=reason,
        superseded=[row.id for row in others],
    )
    return len(puts)
