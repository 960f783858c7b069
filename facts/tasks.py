"""The worker side of the turn queue (django-tasks; `manage.py db_worker` runs the tasks).

    record_turn (facts.intake.queue) ──► schedule ──► process_thread_task(user, agent, thread)
    process_thread ──► the thread's pending turns, claimed, merged ──► facts.judging.pipeline

Every turn enqueues `process_thread_task` for the end of its debounce window;
`process_thread` claims the thread's pending turns with a lease (`facts.intake.claims`), runs
them through the pipeline as one extraction, and on a failed model call leaves them
pending with the error and a retry scheduled with backoff. `reclaim_expired` hands the
turns of a worker that died (its lease lapsed) to the next one; `retry_failed` puts
failed turns back in the queue.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone
from django_tasks import TaskContext, TaskResultStatus, task, task_backends
from django_tasks_db.models import DBTaskResult

from facts import tenancy
from facts.erasure.guard import ErasureInProgress, erasing
from facts.intake import claims
from facts.judging.extraction import ExtractionError
from facts.judging.pipeline import LOST, LOST_ERROR, RunResult, run_pipeline
from facts.models import ExtractionRun, Turn

log = logging.getLogger(__name__)

LAPSED_ERROR = "the worker processing it stopped renewing its claim (killed or stalled); taken over"


@task(takes_context=True)
def process_thread_task(context: TaskContext, user_id: str, agent_name: str, thread_id: str) -> dict[str, Any]:
    """Extract the pending turns of one (user, agent, thread) once its debounce window is over.

    Every turn enqueues one of these for the end of its own window, so when turns come in
    quick succession the earlier tasks find the window still open and the last one merges
    them all into one extraction. The turns are claimed with the job's id, so the sweep
    that takes over a dead worker's turns can also close that worker's job row, which
    django-tasks-db would otherwise show as RUNNING for good.
    """
    claim = str(context.task_result.id).replace("-", "")
    outcome = process_thread(user_id, agent_name, thread_id, claim=claim)
    data: dict[str, Any] = {"status": outcome.status, "turn_ids": outcome.turn_ids}
    if outcome.result is not None:
        data["run_id"] = outcome.result.run_id
    if outcome.error:
        data["error"] = outcome.error
    return data


def debounce() -> timedelta:
    return timedelta(seconds=settings.MEMORY_DEBOUNCE_SECONDS)


def schedule(user_id: str, agent_name: str, thread_id: str, *, at: datetime | None) -> None:
    """Enqueue the worker task (in the caller's transaction, so turn and task commit together)."""
    task = process_thread_task
    # A backend without deferral (the immediate one in tests) runs it now; it finds the
    # window still open and leaves the turns for a later run or `process_turns`.
    if at is not None and task_backends[task.backend].supports_defer:
        task = task.using(run_after=at)
    task.enqueue(user_id, agent_name, thread_id)


# --- processing -------------------------------------------------------------------


@dataclass
class ThreadOutcome:
    status: str  # "idle" | "waiting" | "done" | "failed" | "lost"
    turn_ids: list[int] = field(default_factory=list)
    result: RunResult | None = None
    error: str = ""


def _backoff(attempts: int) -> timedelta:
    seconds = settings.MEMORY_RETRY_BACKOFF_SECONDS * (2 ** max(0, attempts - 1))
    return timedelta(seconds=min(seconds, 3600))


def process_thread(
    user_id: str,
    agent_name: str,
    thread_id: str,
    *,
    now: datetime | None = None,
    force: bool = False,
    model: Any = None,
    claim: str = "",
) -> ThreadOutcome:
    """Extract all pending turns of one thread once the debounce window has passed.

    The window runs from the latest turn; a flush turn (or `force`) skips it. Turns are
    claimed by a conditional update so two workers never process the same turn, with a
    lease renewed while the work runs; turns of the thread whose claim lapsed are taken
    over first. `claim` is the claim's token (the worker task passes its job id; a
    fresh one otherwise).
    """
    now = now or timezone.now()
    thread = {"user_id": user_id, "agent_name": agent_name, "thread_id": thread_id}
    reclaim_expired(thread=thread, enqueue=False)
    if erasing(user_id, agent_name, thread_id):
        return ThreadOutcome("idle")  # its turns are being erased: nothing to claim
    pending = list(Turn.objects.filter(status=Turn.Status.PENDING, **thread).order_by("received_at", "pk"))
    if not pending:
        return ThreadOutcome("idle")
    latest = max(t.received_at for t in pending)
    due_at = max([latest + debounce()] + [t.process_after for t in pending if t.process_after and not t.flush])
    if not force and not any(t.flush for t in pending) and now < due_at:
        return ThreadOutcome("waiting", [t.pk for t in pending])
    # Claimed one by one with a conditional update: two workers never take the same turn.
    token, until = claim or claims.new_token(), claims.lease_until()
    pending = [
        t
        for t in pending
        if Turn.objects.filter(pk=t.pk, status=Turn.Status.PENDING).update(
            status=Turn.Status.PROCESSING, attempts=F("attempts") + 1, claimed_by=token, lease_until=until
        )
    ]
    if not pending:
        return ThreadOutcome("idle")
    ids = [t.pk for t in pending]
    messages = [m for t in pending for m in t.messages]
    project_id = next((t.project_id for t in reversed(pending) if t.project_id), "")
    if not tenancy.may_use(user_id, project_id):
        # Stored before the tenant walls (or the project changed hands since): the user's
        # own memory is still extracted, nothing is read from or written to the project.
        log.warning(
            "thread %s/%s/%s: project %r belongs to another tenant; extracted without it",
            *(user_id, agent_name, thread_id, project_id),
        )
        project_id = ""
    with claims.keep_alive(token):
        try:
            result = run_pipeline(
                user_id=user_id,
                agent_name=agent_name,
                thread_id=thread_id,
                project_id=project_id,
                messages=messages,
                model=model,
                turn_ids=ids,
                claim=token,
            )
        except ExtractionError as exc:
            return _failed(ids, token, str(exc), now)
        except ErasureInProgress:
            # The user is being erased: these turns go with them; no retry is scheduled.
            return ThreadOutcome("idle", ids)
        except Exception as exc:  # a bug or a store problem: keep the turns, record why
            log.exception("processing thread %s/%s/%s failed", user_id, agent_name, thread_id)
            return _failed(ids, token, f"{exc.__class__.__name__}: {exc}", now)
    if result.status == LOST:
        return ThreadOutcome(LOST, ids, result, error=result.error)
    return ThreadOutcome("done", ids, result)


def _failed(ids: list[int], token: str, error: str, now: datetime) -> ThreadOutcome:
    """Leave the turns pending (or failed after the last attempt) with the error; retry later.

    Only turns still claimed with `token`: a worker whose claim lapsed and was taken
    over leaves the new owner's turns alone."""
    held = Turn.objects.filter(pk__in=ids, claimed_by=token, status=Turn.Status.PROCESSING)
    turns = list(held)
    if not turns:
        return ThreadOutcome(LOST, ids, error=LOST_ERROR)
    attempts = max((t.attempts for t in turns), default=1)
    if attempts >= settings.MEMORY_EXTRACTION_MAX_ATTEMPTS:
        held.update(status=Turn.Status.FAILED, error=error[:2000], lease_until=None)
        return ThreadOutcome("failed", ids, error=error)
    retry_at = now + _backoff(attempts)
    held.update(status=Turn.Status.PENDING, error=error[:2000], process_after=retry_at, flush=False, lease_until=None)
    if turns and task_backends[process_thread_task.backend].supports_defer:
        first = turns[0]
        process_thread_task.using(run_after=retry_at).enqueue(first.user_id, first.agent_name, first.thread_id)
    return ThreadOutcome("failed", ids, error=error)


def due_threads(*, now: datetime | None = None, include_waiting: bool = False) -> list[tuple[str, str, str]]:
    """(user, agent, thread) of every thread with pending turns (due ones unless include_waiting)."""
    now = now or timezone.now()
    query = Turn.objects.filter(status=Turn.Status.PENDING)
    if not include_waiting:
        query = query.filter(Q(process_after__isnull=True) | Q(process_after__lte=now) | Q(flush=True))
    return sorted(set(query.values_list("user_id", "agent_name", "thread_id")))


def reclaim_expired(
    *, thread: Mapping[str, str] | None = None, ids: Sequence[int] | None = None, enqueue: bool = True
) -> int:
    """Hand back the work of workers whose claim lapsed (killed, stalled): their runs are
    closed as failed, their turns go back to pending (or to failed once
    `MEMORY_EXTRACTION_MAX_ATTEMPTS` claims have died on them: a turn that kills its
    worker must not kill every worker in turn) and, with `enqueue`, each thread's task
    is queued to run now. Returns the number of turns handed back.

    Every update is conditional on the claim still being the lapsed one, so two sweeps
    at once, or a sweep racing a renewal, hand a turn back once or not at all.
    """
    now = timezone.now()
    runs = claims.stuck_runs(now)
    turns = claims.stuck_turns(now)
    if thread is not None:
        turns = turns.filter(**thread)
    if ids is not None:
        turns = turns.filter(pk__in=ids)
    if thread is None and ids is None:
        # Runs are closed with their turns below; this catches a run whose turns were
        # already handed back some other way.
        runs.update(status=ExtractionRun.Status.FAILED, error=LAPSED_ERROR, finished_at=now)
    handed: set[tuple[str, str, str]] = set()
    count = 0
    for turn in turns.only("pk", "claimed_by", "attempts", "user_id", "agent_name", "thread_id"):
        same_claim = Turn.objects.filter(pk=turn.pk, status=Turn.Status.PROCESSING, claimed_by=turn.claimed_by)
        same_claim = same_claim.filter(claims.lapsed(now))
        if turn.attempts >= settings.MEMORY_EXTRACTION_MAX_ATTEMPTS:
            changed = same_claim.update(status=Turn.Status.FAILED, error=LAPSED_ERROR, lease_until=None)
        else:
            # flush: its debounce window was over when it was first claimed; run it now.
            changed = same_claim.update(
                status=Turn.Status.PENDING, error=LAPSED_ERROR, lease_until=None, process_after=None, flush=True
            )
            if changed:
                handed.add((turn.user_id, turn.agent_name, turn.thread_id))
        if changed:
            ExtractionRun.objects.filter(claimed_by=turn.claimed_by, status=ExtractionRun.Status.RUNNING).update(
                status=ExtractionRun.Status.FAILED, error=LAPSED_ERROR, finished_at=now
            )
            _close_dead_job(turn.claimed_by)
        count += changed
    if handed:
        log.warning("took over %d turn(s) of %d thread(s) whose worker's claim lapsed", count, len(handed))
    if enqueue:
        for user_id, agent_name, thread_id in sorted(handed):
            schedule(user_id, agent_name, thread_id, at=None)
    return count


class ClaimLapsed(Exception):
    """Recorded on the job row of a worker task whose claim lapsed (the worker died)."""


def _close_dead_job(claim: str) -> None:
    """Mark the django-tasks-db job that held `claim` (its id, see `tasks.py`) as failed:
    its worker died with it RUNNING, and nothing else would ever finish it."""
    try:
        job_id = uuid.UUID(hex=claim)
    except ValueError:
        return
    # Claims of `process_turns` or `ingest` are random and match no job.
    job = DBTaskResult.objects.filter(pk=job_id, status=TaskResultStatus.RUNNING).first()
    if job is not None:
        job.set_failed(ClaimLapsed(LAPSED_ERROR))


def retry_failed(*, ids: Sequence[int] | None = None) -> int:
    """Failed turns, and turns stuck in processing past their lease (their worker died),
    go back to pending with their threads queued; `ids` limits it to those turns.
    Returns how many turns went back."""
    stuck = reclaim_expired(ids=ids)
    failed = Turn.objects.filter(status=Turn.Status.FAILED)
    if ids is not None:
        failed = failed.filter(pk__in=ids)
    threads = set(failed.values_list("user_id", "agent_name", "thread_id"))
    count = failed.update(status=Turn.Status.PENDING, attempts=0, process_after=None, flush=True)
    for user_id, agent_name, thread_id in sorted(threads):
        schedule(user_id, agent_name, thread_id, at=None)
    return stuck + count


def retry_run(run: ExtractionRun) -> int:
    """Queue a failed run's turns for extraction now: the turns of its thread that are
    failed, or pending with the error of a failed attempt and waiting out a backoff.
    Returns how many turns went back; 0 when a later run already processed them."""
    if run.status != ExtractionRun.Status.FAILED:
        return 0
    turns = Turn.objects.filter(user_id=run.user_id, agent_name=run.agent_name, thread_id=run.thread_id).filter(
        Q(status=Turn.Status.FAILED) | Q(status=Turn.Status.PENDING) & ~Q(error="")
    )
    count = turns.update(status=Turn.Status.PENDING, attempts=0, process_after=None, flush=True)
    if count:
        schedule(run.user_id, run.agent_name, run.thread_id, at=None)
    return count
