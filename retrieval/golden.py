"""Golden queries: saved searches whose expected top results are re-checked after edits
(from the search playground). A check runs the real search and records its outcome."""

from __future__ import annotations

from collections.abc import Sequence

from django.utils import timezone

from facts.erasure.plan import delete_in
from facts.erasure.scope import Scope

from .models import GoldenQuery
from .search import search


def check_golden(golden: GoldenQuery) -> GoldenQuery:
    """Run the saved query again; it passes when the expected ids lead the results in order."""
    hits = search(
        golden.query,
        user_id=golden.user_id,
        agent_name=golden.agent_name,
        project_id=golden.project_id or None,
        limit=max(5, len(golden.expected_ids)),
    )
    ids = [hit.id for hit in hits]
    golden.last_result_ids = ids
    golden.last_passed = ids[: len(golden.expected_ids)] == list(golden.expected_ids)
    golden.last_checked_at = timezone.now()
    golden.save(update_fields=["last_result_ids", "last_passed", "last_checked_at"])
    return golden


# --- erasure: registered with `facts.erasure.extra` by `RetrievalConfig.ready` -----------


def erased_by(scope: Scope, fact_ids: set[str]) -> list[int]:
    """The golden queries an erasure of `scope` removes: those naming one of its cards
    (expected or last seen), the whole user's, and an agent's own."""
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


def delete_erased(keys: Sequence[int]) -> None:
    delete_in(GoldenQuery.objects.all(), "pk", keys)
