"""One batch of card writes, planned against what is live now, sent in one `writer.commit`.

The gate (for an extraction run) and a reviewer's approval both decide card by card, but
write once: `Plan` keeps, per bucket, the active cards (from the mirror, which is updated
under the same lock as the files) plus the cards this batch adds, so a later candidate
sees an earlier one's key replacement or content. It owns the two card changes memory
knows: a new card (superseding an active card with the same key) and a confirmation.
Callers hold the buckets' locks (`Store.lock`) from planning to commit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from facts.enums import CardStatus, Category
from facts.judging.gate import content_key
from facts.judging.schemas import Confirmation
from facts.models import FactCard
from facts.storage import writer
from facts.storage.cardfile import Card, Source
from facts.storage.ids import new_fact_id
from facts.storage.profilefile import Profile
from facts.storage.store import Bucket, Store


def bucket_filter(bucket: Bucket) -> dict[str, str]:
    if bucket.user_id is not None:
        return {"user_id": bucket.user_id, "agent_name": bucket.agent_name or "", "project_id": ""}
    return {"user_id": "", "project_id": bucket.project_id or ""}


@dataclass
class Live:
    """Active cards of one bucket (id → key, content), including this batch's new ones."""

    keys: dict[str, str] = field(default_factory=dict)  # key → id
    contents: dict[str, str] = field(default_factory=dict)  # normalized content → id
    rows: dict[str, tuple[str, str]] = field(default_factory=dict)  # id → (key, content key)

    def add(self, fact_id: str, key: str, content: str) -> None:
        normalized = content_key(content)
        self.rows[fact_id] = (key, normalized)
        self.keys[key] = fact_id
        self.contents.setdefault(normalized, fact_id)

    def remove(self, fact_id: str) -> None:
        key, normalized = self.rows.pop(fact_id, ("", ""))
        if self.keys.get(key) == fact_id:
            del self.keys[key]
        if self.contents.get(normalized) == fact_id:
            del self.contents[normalized]

    def find_content(self, content: str) -> str | None:
        return self.contents.get(content_key(content))


class Memory(Protocol):
    """What the gate reads of memory: the live one (`LiveMemory`), or memory as it stood
    at some past moment (`facts.judging.backtest` replays old candidates against that)."""

    def active(self, bucket: Bucket) -> Iterable[tuple[str, str, str]]:
        """(id, key, content) of the bucket's active cards, oldest first."""
        ...

    def read_card(self, bucket: Bucket, fact_id: str) -> Card | None: ...

    def read_profile(self, user_id: str) -> Profile: ...


class LiveMemory:
    def __init__(self, store: Store) -> None:
        self.store = store

    def active(self, bucket: Bucket) -> Iterable[tuple[str, str, str]]:
        # The mirror is updated under the same lock as the files, so it is current;
        # only the cards that change are read from their files.
        query = FactCard.objects.filter(status=CardStatus.ACTIVE, **bucket_filter(bucket))
        return query.order_by("created_at").values_list("id", "key", "content")

    def read_card(self, bucket: Bucket, fact_id: str) -> Card | None:
        return self.store.read_card(bucket, fact_id)

    def read_profile(self, user_id: str) -> Profile:
        return self.store.read_profile(user_id)


class Plan:
    """Card writes collected for one `writer.commit`, one final state per card id."""

    def __init__(self, store: Store, memory: Memory | None = None) -> None:
        self.store = store
        self.memory: Memory = memory or LiveMemory(store)
        self.live: dict[Bucket, Live] = {}
        self.ops: dict[str, writer.Put] = {}

    def bucket(self, bucket: Bucket) -> Live:
        live = self.live.get(bucket)
        if live is None:
            live = Live()
            for fact_id, key, content in self.memory.active(bucket):
                live.add(fact_id, key, content)
            self.live[bucket] = live
        return live

    def card(self, bucket: Bucket, fact_id: str) -> Card | None:
        """The card as this batch will leave it (pending write) or as its file says."""
        pending = self.ops.get(fact_id)
        if pending is not None:
            return pending.card
        card = self.memory.read_card(bucket, fact_id)
        return card if card is not None and card.status == CardStatus.ACTIVE else None

    def put(self, card: Card, expected: int | None, reason: str = "") -> None:
        previous = self.ops.get(card.id)
        self.ops[card.id] = writer.Put(card, previous.expected_revision if previous else expected, reason)

    def add_fact(self, bucket: Bucket, card: Card, reason: str = "") -> Card:
        """Write `card`; an active card with the same key is superseded by it, unless
        `card` is a backfill (dated before it is written: said earlier, issue 35) of
        something said before that card: then `card` goes straight into history,
        superseded by the newer one, which stays."""
        live = self.bucket(bucket)
        old_id = live.keys.get(card.key)
        old = self.card(bucket, old_id) if old_id else None
        if old is not None and card.created_at < card.updated_at and old.created_at > card.created_at:
            card = card.model_copy(update={"status": CardStatus.SUPERSEDED, "superseded_by": old.id})
            self.put(card, None, reason)
            return card
        if old is not None:
            retired = old.model_copy(
                update={"status": CardStatus.SUPERSEDED, "superseded_by": card.id, "updated_at": card.updated_at}
            )
            self.put(retired, old.revision, reason)
        if old_id:
            live.remove(old_id)
        self.put(card, None, reason)
        live.add(card.id, card.key, card.content)
        return card

    def confirm(
        self, bucket: Bucket, card: Card, at: datetime, reason: str = "", *, said_at: datetime | None = None
    ) -> Card:
        """Count a confirmation; `last_confirmed_at` is when it was said (`said_at`, else
        `at`), never moved back by a backfill of an older one."""
        confirmed = said_at or at
        if card.last_confirmed_at is not None and card.last_confirmed_at > confirmed:
            confirmed = card.last_confirmed_at
        updated = card.model_copy(
            update={"last_confirmed_at": confirmed, "confirmation_count": card.confirmation_count + 1, "updated_at": at}
        )
        self.put(updated, card.revision, reason)
        return updated

    def find_confirmed(
        self, confirmation: Confirmation, *, user_id: str, agent_name: str, project_id: str | None
    ) -> tuple[Bucket, Card] | None:
        """The active card a confirmation names (by id, else by key): the user × agent
        bucket first, then the project's."""
        buckets = [Bucket(user_id=user_id, agent_name=agent_name)]
        if project_id:
            buckets.append(Bucket(project_id=project_id))
        for bucket in buckets:
            live = self.bucket(bucket)
            fact_id = confirmation.fact_id if confirmation.fact_id in live.rows else None
            fact_id = fact_id or (live.keys.get(confirmation.key) if confirmation.key else None)
            card = self.card(bucket, fact_id) if fact_id else None
            if card is not None:
                return bucket, card
        return None

    def commit(self, *, actor: str, reason: str, record: Callable[[], None] | None = None) -> None:
        writer.commit(list(self.ops.values()), actor=actor, reason=reason, store=self.store, record=record)


def new_card(
    *,
    bucket: Bucket,
    key: str,
    content: str,
    category: str,
    confidence: float,
    at: datetime,
    source: Source,
    said_at: datetime | None = None,
) -> Card:
    """A new active card of `bucket` (user × agent, or project), written `at`; its
    created_at is when its evidence was said (`said_at`, issue 35), else `at`."""
    return Card(
        id=new_fact_id(),
        key=key,
        category=Category(category),
        confidence=confidence,
        user_id=bucket.user_id,
        agent_name=bucket.agent_name if bucket.user_id is not None else None,
        project_id=bucket.project_id if bucket.user_id is None else None,
        created_at=min(said_at, at) if said_at is not None else at,
        updated_at=at,
        source=source,
        content=content,
    )
