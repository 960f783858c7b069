"""What every other writer asks while an erasure runs: the durable marker (an `Erasure`
row with status running) refuses turns, runs, cards and profile changes in its scope
(`ErasureInProgress`; the API answers 409), and the worker claims nothing of it. The
erasure itself writes through the same functions with the guard bypassed.
"""

from __future__ import annotations

import contextvars
import hashlib
from collections.abc import Iterable, Sequence

from django.db import connection

from facts.erasure.scope import scope_of
from facts.models import (
    Erasure,
    ExtractionRun,
)
from facts.storage.cardfile import Card


class ErasureInProgress(Exception):
    """A turn or a memory write in the scope of a running erasure: refused, never half-kept."""

    def __init__(self, user_id: str) -> None:
        super().__init__(
            f"an erasure of user {user_id!r} is in progress; nothing of this user is accepted until it ends"
        )
        self.user_id = user_id


bypass: contextvars.ContextVar[bool] = contextvars.ContextVar("erasing", default=False)


def _lock_key(user_id: str) -> int:
    return int.from_bytes(hashlib.sha256(user_id.encode()).digest()[:8], "big", signed=True)


def user_barrier(user_id: str, *, exclusive: bool) -> None:
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
    if bypass.get():
        return
    user_barrier(user_id, exclusive=False)
    for marker in _running([user_id]):
        if scope_of(marker).covers_turn(agent_name, thread_id, project_id):
            raise ErasureInProgress(user_id)


def refuse_cards(cards: Sequence[Card]) -> None:
    """The write function asks this under the bucket locks before writing any card: a
    card of a user being erased is refused (fail closed: any running erasure of the user
    refuses all of the user's new cards; a project card is refused when it came from a
    run of that user)."""
    if bypass.get() or not cards or not Erasure.objects.filter(status=Erasure.Status.RUNNING).exists():
        return
    users = {c.user_id for c in cards if c.user_id is not None}
    markers = _running(users)
    if markers:
        raise ErasureInProgress(markers[0].user_id)
    run_ids = [int(run_id) for c in cards if c.user_id is None and (run_id := c.source.run_id or "").isdigit()]
    if run_ids:
        owners = set(ExtractionRun.objects.filter(pk__in=run_ids).values_list("user_id", flat=True))
        markers = _running(owners)
        if markers:
            raise ErasureInProgress(markers[0].user_id)


def refuse_runs(runs: Sequence[ExtractionRun]) -> None:
    """The gate asks this under the bucket locks before judging runs: refused when an
    erasure covers a run's thread, or when the run row is gone (an erasure finished
    while the run waited for its model)."""
    if bypass.get() or not runs:
        return
    for run in runs:
        if any(scope_of(m).covers_turn(run.agent_name, run.thread_id, run.project_id) for m in _running([run.user_id])):
            raise ErasureInProgress(run.user_id)
    ids = {run.pk for run in runs}
    if ExtractionRun.objects.filter(pk__in=ids).count() != len(ids):
        raise ErasureInProgress(next(run.user_id for run in runs))


def refuse_profile(user_id: str) -> None:
    """The write function asks this under the user's lock before writing memory.json."""
    if bypass.get():
        return
    if Erasure.objects.filter(status=Erasure.Status.RUNNING, user_id=user_id).exists():
        raise ErasureInProgress(user_id)


def erasing(user_id: str, agent_name: str, thread_id: str) -> bool:
    """Whether a running erasure covers this thread (the worker claims nothing of it)."""
    return any(scope_of(m).covers_turn(agent_name, thread_id) for m in _running([user_id]))


def running_for(user_id: str) -> Erasure | None:
    return Erasure.objects.filter(status=Erasure.Status.RUNNING, user_id=user_id).order_by("pk").first()
