"""The turn queue's front: a turn is stored before the caller gets an answer.

`record_turn` validates a turn (`facts.intake.turns.clean_turn`), stores the messages not
seen before in this thread as a pending `Turn` row and schedules the worker task
(`facts.tasks`) for the end of the debounce window, all in one transaction. Messages
already extracted (or already waiting) for the thread are skipped, so the
summarization flush and the normal path never feed the same message twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from facts import tenancy
from facts.erasure.guard import refuse_turn
from facts.intake.turns import CleanTurn, clean_turn
from facts.models import ExtractedMessage, Turn
from facts.tasks import debounce, schedule


@dataclass
class Receipt:
    accepted: int
    turn_ids: list[int]


def _known_ids(turn: CleanTurn) -> set[str]:
    """Ids already extracted or already waiting in a pending turn of the same thread.

    Two plain SELECTs on indexed columns: every accepted turn runs them, and building
    the two ORM queries cost several times more than running them.
    """
    if not turn.message_ids:
        return set()
    qn = connection.ops.quote_name
    extracted, turns = ExtractedMessage._meta, Turn._meta
    thread = [turn.user_id, turn.agent_name, turn.thread_id]
    ids = list(dict.fromkeys(turn.message_ids))
    known: set[str] = set()
    with connection.cursor() as cursor:
        for start in range(0, len(ids), 500):  # under every SQLite's limit of parameters
            chunk = ids[start : start + 500]
            cursor.execute(
                f"SELECT {qn('message_id')} FROM {qn(extracted.db_table)} WHERE {qn('user_id')} = %s"
                f" AND {qn('agent_name')} = %s AND {qn('thread_id')} = %s"
                f" AND {qn('message_id')} IN ({', '.join(['%s'] * len(chunk))})",
                [*thread, *chunk],
            )
            known.update(row[0] for row in cursor.fetchall())
        cursor.execute(
            f"SELECT {qn('message_ids')} FROM {qn(turns.db_table)} WHERE {qn('status')} IN (%s, %s)"
            f" AND {qn('user_id')} = %s AND {qn('agent_name')} = %s AND {qn('thread_id')} = %s",
            [Turn.Status.PENDING.value, Turn.Status.PROCESSING.value, *thread],
        )
        for (waiting,) in cursor.fetchall():
            known.update(json.loads(waiting) if isinstance(waiting, str) else waiting)
    return known


def record_turn(
    *,
    user_id: Any,
    agent_name: Any,
    thread_id: Any,
    project_id: Any = None,
    messages: Any,
    flush: bool = False,
    created_at: Any = None,
) -> Receipt:
    """Validate a turn, store it durably and schedule its extraction (`queue_turn`).

    Raises `facts.intake.turns.TurnRejected` for input no door accepts (`ProjectNotAllowed`, one
    of them, for a project of another tenant).
    """
    turn = clean_turn(
        user_id=user_id,
        agent_name=agent_name,
        thread_id=thread_id,
        project_id=project_id,
        messages=messages,
        created_at=created_at,
    )
    return queue_turn(turn, flush=flush)


def queue_turn(turn: CleanTurn, *, flush: bool = False) -> Receipt:
    """Store a validated turn durably and schedule its extraction; returns once it is committed.

    Messages already extracted (or already waiting) for this thread are skipped, so the
    summarization flush and the normal path never feed the same message twice.
    `flush=True` processes the thread without waiting for the debounce window.
    """
    # A project of another tenant is refused at every door (facts/tenancy.py).
    tenancy.check(turn.user_id, turn.project_id)
    with transaction.atomic():
        # A turn of a user being erased is refused, never half-kept (the API answers 409).
        refuse_turn(turn.user_id, turn.agent_name, turn.thread_id, turn.project_id)
        known = _known_ids(turn)
        fresh = [(m, i) for m, i in zip(turn.messages, turn.message_ids, strict=True) if i not in known]
        now = timezone.now()
        turn_ids: list[int] = []
        if fresh:
            process_after = now if flush else now + debounce()
            row = Turn.objects.create(
                **turn.thread(),
                project_id=turn.project_id,
                messages=[m for m, _ in fresh],
                message_ids=[i for _, i in fresh],
                flush=flush,
                process_after=process_after,
            )
            turn_ids.append(row.pk)
        if fresh or flush:
            # The window is counted from the row's `received_at` (set by the database
            # layer a little after `now`): a task due before it would find the window
            # still open, and nothing would run the thread again. (No fresh messages
            # means a flush: it runs now.)
            at = None if flush else row.received_at + debounce()
            schedule(turn.user_id, turn.agent_name, turn.thread_id, at=at)
    return Receipt(accepted=len(fresh), turn_ids=turn_ids)
