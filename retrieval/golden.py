"""Golden queries: saved searches whose expected top results are re-checked after edits
(from the search playground). A check runs the real search and records its outcome."""

from __future__ import annotations

from django.utils import timezone

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
