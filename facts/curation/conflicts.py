"""Conflict detection: live cards of one bucket that claim the same attribute.

Two live cards collide when their keys are equal, or equal under the one key rule of the
write side (`schemas.normalize_key`: case, spaces and hyphens), and a card is flagged
when an accepted correction in its bucket has the same key. The dashboard lists what
`find_conflicts` returns; resolving one (keep a card, supersede the others) is a
curator's change, `facts.curation.cards.resolve_conflict`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Count

from facts.enums import CardStatus, Category
from facts.judging.schemas import normalize_key
from facts.models import FactCard


@dataclass
class Conflict:
    scope: str
    user_id: str
    agent_name: str
    project_id: str
    key: str
    kind: str  # "same key" or "contradicts a correction"
    cards: list[FactCard]


def find_conflicts(limit: int = 100) -> list[Conflict]:
    """Live cards of one bucket whose keys collide (exactly, or after normalising case,
    spaces and hyphens), and cards that an accepted correction with the same key contradicts."""
    dupes = (
        FactCard.objects.filter(status=CardStatus.ACTIVE)
        .values("user_id", "agent_name", "project_id", "key")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .order_by()[:limit]
    )
    groups: dict[tuple[str, str, str, str], list[FactCard]] = defaultdict(list)
    for d in dupes:
        for row in FactCard.objects.filter(
            status=CardStatus.ACTIVE,
            user_id=d["user_id"],
            agent_name=d["agent_name"],
            project_id=d["project_id"],
            key=d["key"],
        ):
            groups[(row.user_id, row.agent_name, row.project_id, normalize_key(row.key))].append(row)
    # Near-collisions and corrections: only the buckets that have a live correction.
    corrections = (
        FactCard.objects.filter(status=CardStatus.ACTIVE, category=Category.CORRECTION)
        .values_list("user_id", "agent_name", "project_id")
        .distinct()[:limit]
    )
    correction_keys: set[tuple[str, str, str, str]] = set()
    for user_id, agent_name, project_id in corrections:
        live = FactCard.objects.filter(
            status=CardStatus.ACTIVE, user_id=user_id, agent_name=agent_name, project_id=project_id
        ).only("id", "key", "category", "content", "confidence", "created_at", "user_id", "agent_name", "project_id")[
            :2000
        ]
        by_key: dict[str, list[FactCard]] = defaultdict(list)
        for row in live:
            by_key[normalize_key(row.key)].append(row)
            if row.category == Category.CORRECTION:
                correction_keys.add((user_id, agent_name, project_id, normalize_key(row.key)))
        for nk, rows in by_key.items():
            if len(rows) > 1:
                bucket_key = (user_id, agent_name, project_id, nk)
                known = {r.id for r in groups.get(bucket_key, [])}
                groups[bucket_key].extend(r for r in rows if r.id not in known)
    out = []
    for (user_id, agent_name, project_id, nk), rows in groups.items():
        rows.sort(key=lambda r: (r.created_at, r.id))
        kind = "contradicts a correction" if (user_id, agent_name, project_id, nk) in correction_keys else "same key"
        scope = f"{user_id} × {agent_name}" if user_id else f"project {project_id}"
        out.append(Conflict(scope, user_id, agent_name, project_id, nk, kind, rows))
    return out[:limit]
