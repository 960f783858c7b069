"""Durable, asynchronous ingestion of agent turns (DESIGN.md §4 "Ingestion").

    record_turn ──► Turn rows (stored before the caller gets an answer)
                └─► task process_thread(user, agent, thread), run after the debounce window
    process_thread ──► all pending turns of the thread, merged ──► run_pipeline
    run_pipeline ──► filter ──► extract (or replay) ──► gate ──► writer

A message id that has been fed to extraction is recorded in `ExtractedMessage` and never
fed again, whichever path (normal turn, summarization flush, replay) brings it back. A
failed model call leaves the turns pending with the error and retries with backoff.
Turns being processed are claimed with a lease (`facts.claims`): a worker that dies
strands nothing, `reclaim_expired` hands its turns to the next one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone
from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict

from . import bulk, claims
from .enums import PROFILE_SECTIONS
from .erasure import ErasureInProgress, erasing, refuse_turn
from .extraction import ExtractionError, extract, extractor_for, model_name_for
from .filtering import Row, filter_messages, has_user_text, text_of, to_message
from .models import Candidate, ExtractedMessage, ExtractionRun, FactCard, Turn
from .runs import Context, apply_runs, json_safe
from .sanitize import InvalidMessage, NonFinite, clean_value, has_control
from .schemas import Parsed, parse_update
from .store import InvalidId, get_store, normalize_agent, normalize_id

log = logging.getLogger(__name__)


class TurnRejected(ValueError):
    """Bad input: `field` names what is wrong (for a 400 answer); str() is the whole text."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    @classmethod
    def from_lines(cls, lines: list[str]) -> TurnRejected:
        field, _, message = lines[0].partition(": ")
        exc = cls(field, message)
        exc.args = ("; ".join(lines),)
        return exc


@dataclass
class Receipt:
    accepted: int
    turn_ids: list[int]


@dataclass
class CandidateSummary:
    kind: str
    key: str
    section: str
    verdict: str
    reasons: list[str]

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind}
        if self.kind == "summary":
            data["section"] = self.section
        else:
            data["key"] = self.key
        data.update(verdict=self.verdict, reasons=self.reasons)
        return data


@dataclass
class RunResult:
    run_id: int | None
    status: str
    roles: list[str] = field(default_factory=list)
    candidates: list[CandidateSummary] = field(default_factory=list)
    saved: int = 0
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "roles": self.roles,
            "candidates": [c.as_dict() for c in self.candidates],
            "saved": self.saved,
        }


# --- validation -------------------------------------------------------------------


@dataclass
class CleanTurn:
    user_id: str
    agent_name: str
    thread_id: str
    project_id: str
    messages: list[dict[str, Any]]  # LangChain dicts, every message with an id
    message_ids: list[str]


def _required_id(field_name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TurnRejected(field_name, "a non-empty string is required")
    if len(value) > settings.API_MAX_ID_CHARS:
        raise TurnRejected(field_name, f"at most {settings.API_MAX_ID_CHARS} characters")
    if has_control(value):  # facts/sanitize.py: ids are refused, text is cleaned
        raise TurnRejected(field_name, "must not contain control characters")
    return value


def _stable_id(message: BaseMessage, seen: set[str]) -> str:
    """An id for a message that came without one: the same message posted twice gets the same id."""
    body = json.dumps([message.type, text_of(message.content)], ensure_ascii=False)
    base = "h-" + hashlib.sha256(body.encode()).hexdigest()[:20]
    candidate, n = base, 1
    while candidate in seen:
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def clean_turn(
    *,
    user_id: Any,
    agent_name: Any,
    thread_id: Any,
    project_id: Any = None,
    messages: Any,
) -> CleanTurn:
    """Validate a turn; raise `TurnRejected(field, message)` on the first problem."""
    user_id = _required_id("user_id", user_id)
    try:
        normalize_id(user_id, what="user_id")
    except InvalidId as exc:
        raise TurnRejected("user_id", str(exc)) from None
    if agent_name is not None and not isinstance(agent_name, str):
        raise TurnRejected("agent_name", "must be a string")
    try:
        agent = normalize_agent(agent_name)
    except InvalidId as exc:
        raise TurnRejected("agent_name", str(exc)) from None
    thread_id = _required_id("thread_id", thread_id)
    if project_id in (None, ""):
        project = ""
    else:
        project = _required_id("project_id", project_id)
        try:
            normalize_id(project, what="project_id")
        except InvalidId as exc:
            raise TurnRejected("project_id", str(exc)) from None
    if not isinstance(messages, list | tuple):
        raise TurnRejected("messages", "a list of messages is required")
    if len(messages) > settings.API_MAX_MESSAGES:
        raise TurnRejected("messages", f"at most {settings.API_MAX_MESSAGES} messages per turn")
    cleaned: list[dict[str, Any]] = []
    ids: list[str] = []
    seen: set[str] = set()
    for index, raw in enumerate(messages):
        where = f"messages[{index}]"
        try:
            message = to_message(raw)
        except InvalidMessage as exc:
            raise TurnRejected.from_lines(exc.lines(("messages", index))) from None
        except ValueError as exc:
            raise TurnRejected(where, str(exc)[:300]) from None
        if len(text_of(message.content)) > settings.API_MAX_MESSAGE_CHARS:
            raise TurnRejected(where, f"content longer than {settings.API_MAX_MESSAGE_CHARS} characters")
        if message.id is not None and (not isinstance(message.id, str) or len(message.id) > 200):
            raise TurnRejected(f"{where}.id", "at most 200 characters")
        if message.id and has_control(message.id):
            raise TurnRejected(f"{where}.id", "must not contain control characters")
        if not message.id:
            message = message.model_copy(update={"id": _stable_id(message, seen)})
        elif message.id in seen:
            continue  # the same message twice in one turn
        seen.add(message.id)
        ids.append(message.id)
        stored = message_to_dict(message)
        try:
            # Control characters out of every string, NaN/Infinity refused (facts/sanitize.py).
            stored["data"] = clean_value(stored["data"], ("messages", index))
        except NonFinite as exc:
            raise TurnRejected(
                exc.path, "NaN and Infinity are not JSON numbers; send a finite number or null"
            ) from None
        cleaned.append(stored)
    return CleanTurn(user_id, agent, thread_id, project, cleaned, ids)


# --- recording --------------------------------------------------------------------


def _thread(turn: CleanTurn | Turn) -> dict[str, str]:
    return {"user_id": turn.user_id, "agent_name": turn.agent_name, "thread_id": turn.thread_id}


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
) -> Receipt:
    """Store a turn durably and schedule its extraction; returns once it is committed.

    Messages already extracted (or already waiting) for this thread are skipped, so the
    summarization flush and the normal path never feed the same message twice.
    `flush=True` processes the thread without waiting for the debounce window.
    """
    turn = clean_turn(
        user_id=user_id, agent_name=agent_name, thread_id=thread_id, project_id=project_id, messages=messages
    )
    with transaction.atomic():
        # A turn of a user being erased is refused, never half-kept (the API answers 409).
        refuse_turn(turn.user_id, turn.agent_name, turn.thread_id, turn.project_id)
        known = _known_ids(turn)
        fresh = [(m, i) for m, i in zip(turn.messages, turn.message_ids, strict=True) if i not in known]
        now = timezone.now()
        turn_ids: list[int] = []
        if fresh:
            process_after = now if flush else now + timedelta(seconds=settings.MEMORY_DEBOUNCE_SECONDS)
            row = Turn.objects.create(
                **_thread(turn),
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
            at = None if flush else row.received_at + _debounce()
            schedule(turn.user_id, turn.agent_name, turn.thread_id, at=at)
    return Receipt(accepted=len(fresh), turn_ids=turn_ids)


def _debounce() -> timedelta:
    return timedelta(seconds=settings.MEMORY_DEBOUNCE_SECONDS)


def schedule(user_id: str, agent_name: str, thread_id: str, *, at: datetime | None) -> None:
    """Enqueue the worker task (in the caller's transaction, so turn and task commit together)."""
    from django_tasks import task_backends

    from .tasks import process_thread_task

    task = process_thread_task
    # A backend without deferral (the immediate one in tests) runs it now; it finds the
    # window still open and leaves the turns for a later run or `process_turns`.
    if at is not None and task_backends[task.backend].supports_defer:
        task = task.using(run_after=at)
    task.enqueue(user_id, agent_name, thread_id)


# --- processing -------------------------------------------------------------------


# The status of a RunResult whose claim lapsed and was taken over before it wrote.
LOST = "lost"
LOST_ERROR = "lease lost: the claim lapsed and another worker took these turns over; nothing was written"
LAPSED_ERROR = "the worker processing it stopped renewing its claim (killed or stalled); taken over"


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
    due_at = max([latest + _debounce()] + [t.process_after for t in pending if t.process_after and not t.flush])
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
    from django_tasks import task_backends

    from .tasks import process_thread_task

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
    from django_tasks import TaskResultStatus
    from django_tasks_db.models import DBTaskResult

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


# --- the pipeline -------------------------------------------------------------------


def _reference(user_id: str, agent_name: str, project_id: str) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """What the model may compare against (never evidence): profile and live facts."""
    profile = get_store().read_profile(user_id)
    summaries = {name: profile.section(name).summary for name in PROFILE_SECTIONS}
    query = Q(user_id=user_id, agent_name=agent_name, project_id="")
    if project_id:
        query |= Q(user_id="", project_id=project_id)
    facts = FactCard.objects.filter(query, status="active").order_by("-updated_at")
    return summaries, list(facts.values("id", "key", "content", "category")[:200])


def _new_messages(user_id: str, agent_name: str, thread_id: str, messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Drop messages whose id was already extracted for this thread (and repeats)."""
    loaded = [_load(m) for m in messages]
    ids = [m.id for m in loaded if m.id]
    done = set(
        ExtractedMessage.objects.filter(
            user_id=user_id, agent_name=agent_name, thread_id=thread_id, message_id__in=ids
        ).values_list("message_id", flat=True)
    )
    fresh, seen = [], set()
    for message in loaded:
        if message.id and (message.id in done or message.id in seen):
            continue
        if message.id:
            seen.add(message.id)
        fresh.append(message)
    return fresh


def _load(raw: Mapping[str, Any] | BaseMessage) -> BaseMessage:
    if isinstance(raw, BaseMessage):
        return raw
    if "data" in raw and "type" in raw:
        return messages_from_dict([dict(raw)])[0]
    return to_message(raw)


@dataclass
class _Started:
    """A run recorded as started: its messages filtered, its candidates parsed, not judged."""

    run: ExtractionRun
    result: RunResult
    ctx: Context | None  # None: no user words left, nothing to judge
    parsed: list[Parsed]
    fed: list[str]  # the message ids it was fed
    turn_ids: Sequence[int]
    started: float

    def finish(self) -> None:
        """The run's outcome, its extracted ids and its turns (in the caller's transaction)."""
        run = self.run
        skipped = self.ctx is None
        _mark_extracted(run, run.user_id, run.agent_name, run.thread_id, self.fed)
        _finish(run, ExtractionRun.Status.SKIPPED if skipped else ExtractionRun.Status.SUCCEEDED, self.started)
        _mark_turns(self.turn_ids, Turn.Status.SKIPPED if skipped else Turn.Status.DONE, run)

    def still_held(self) -> bool:
        """Renew the claim for the write; False when it lapsed and was taken over."""
        return not self.run.claimed_by or claims.renew(self.run.claimed_by) == len(self.turn_ids)

    def lose(self) -> None:
        """The claim was taken over: close the run as failed, write nothing."""
        self.run.error = LOST_ERROR
        _finish(self.run, ExtractionRun.Status.FAILED, self.started)
        self.result.status, self.result.error = LOST, LOST_ERROR

    def summarize(self, candidates: Sequence[Candidate]) -> RunResult:
        result = self.result
        result.candidates = [CandidateSummary(c.kind, c.key, c.section, c.verdict, list(c.reasons)) for c in candidates]
        result.saved = sum(
            1 for c in candidates if c.kind == Candidate.Kind.FACT and c.verdict == "accepted" and c.fact_id
        )
        return result


def _start(
    *,
    user_id: str,
    agent_name: str,
    thread_id: str,
    project_id: str,
    messages: Sequence[Mapping[str, Any]],
    model_output: Any = None,
    model: Any = None,
    now: datetime | None = None,
    turn_ids: Sequence[int] = (),
    claim: str = "",
) -> _Started:
    """filter → extract (or replay `model_output`), recorded as a running ExtractionRun
    under the turns' `claim`.

    Raises `ExtractionError` when the model fails (the run is recorded as failed)."""
    started = time.perf_counter()
    fresh = _new_messages(user_id, agent_name, thread_id, messages)
    rows: list[Row] = filter_messages(fresh)
    replay = model_output is not None
    with transaction.atomic():
        # The run holds the user's words: never recorded once an erasure has begun.
        refuse_turn(user_id, agent_name, thread_id, project_id or "")
        run = ExtractionRun.objects.create(
            user_id=user_id,
            agent_name=agent_name,
            thread_id=thread_id,
            project_id=project_id or "",
            filtered_rows=rows,
            replay=replay,
            extractor="" if replay else extractor_for(model),
            model_name="" if replay else model_name_for(model),
            claimed_by=claim,
            lease_until=claims.lease_until(),
        )
    result = RunResult(run_id=run.pk, status=ExtractionRun.Status.SUCCEEDED, roles=[r["role"] for r in rows])
    fed = [m.id for m in fresh if m.id]
    if not has_user_text(rows):
        # No user words left: no model call, nothing to judge.
        result.status = ExtractionRun.Status.SKIPPED
        return _Started(run, result, None, [], fed, turn_ids, started)
    parsed: list[Parsed]
    if replay:
        try:
            parsed = parse_update(model_output)
        except TypeError:
            parsed = [Parsed("fact", 0, model_output, None, "model output is not a JSON object")]
        run.raw_output = json_safe(model_output)
    else:
        profile, existing = _reference(user_id, agent_name, project_id)
        try:
            extraction = extract(rows, profile=profile, existing_facts=existing, model=model)
        except ExtractionError as exc:
            run.error = str(exc)[:2000]
            _finish(run, ExtractionRun.Status.FAILED, started)
            raise
        parsed = extraction.parsed
        run.raw_output = json_safe(extraction.arguments)
        run.model_ms = extraction.model_ms
        run.prompt_tokens = extraction.prompt_tokens
        run.completion_tokens = extraction.completion_tokens
        run.model_name = extraction.model_name or run.model_name
    ctx = Context.from_settings(
        user_id=user_id, agent_name=agent_name, thread_id=thread_id, project_id=project_id or None, rows=rows, now=now
    )
    return _Started(run, result, ctx, parsed, fed, turn_ids, started)


def _apply(started: Sequence[_Started]) -> list[RunResult]:
    """Gate and write the started runs as one batch; each run's records commit with it.

    A run whose claim lapsed while it ran (a stalled worker, or a model call longer than
    the lease with the heartbeat starved) is dropped before anything is written: the
    worker that took its turns over extracts them, once."""
    everything = started
    held = {id(s): s.still_held() for s in everything}
    for s in everything:
        if not held[id(s)]:
            s.lose()
    started = [s for s in everything if held[id(s)]]
    judged = [s for s in started if s.ctx is not None]

    def record(candidates: list[Candidate]) -> None:
        # Candidates, extracted ids and the runs' outcomes commit together, with the
        # mirror rows of the cards they produced, once those are on disk. An erasure
        # that began since the runs started refuses them (and erases their cards).
        for s in started:
            refuse_turn(s.run.user_id, s.run.agent_name, s.run.thread_id, s.run.project_id)
        bulk.insert(Candidate, candidates)
        for s in started:
            s.finish()

    outcomes = apply_runs([(s.run, s.parsed, s.ctx) for s in judged if s.ctx], record=record)
    by_run = {id(s): rows for s, rows in zip(judged, outcomes, strict=True)}
    return [s.summarize(by_run.get(id(s), [])) if held[id(s)] else s.result for s in everything]


def run_pipeline(**turn: Any) -> RunResult:
    """filter → extract (or replay `model_output`) → gate → writer, recorded as an
    ExtractionRun; the arguments are `_start`'s.

    The turns `turn_ids` are marked processed in the transaction that records the run's
    outcome. Raises `ExtractionError` when the model fails (the run is recorded as
    failed, the turns are left as they are).
    """
    return _apply([_start(**turn)])[0]


def _mark_extracted(run: ExtractionRun, user_id: str, agent_name: str, thread_id: str, ids: Iterable[str]) -> None:
    bulk.insert(
        ExtractedMessage,
        [
            ExtractedMessage(user_id=user_id, agent_name=agent_name, thread_id=thread_id, message_id=i, run=run)
            for i in ids
        ],
        ignore_conflicts=True,
    )


def _mark_turns(ids: Sequence[int], status: str, run: ExtractionRun) -> None:
    if ids:
        turns = Turn.objects.filter(pk__in=ids)
        if run.claimed_by:  # only while still ours: a takeover's turns are the new owner's
            turns = turns.filter(claimed_by=run.claimed_by)
        turns.update(status=status, processed_at=timezone.now(), error="", run=run, lease_until=None)


def _finish(run: ExtractionRun, status: str, started: float) -> None:
    run.status = status
    run.finished_at = timezone.now()
    run.duration_ms = (time.perf_counter() - started) * 1000
    run.save(
        update_fields=[
            "status", "finished_at", "duration_ms", "error", "raw_output", "model_name",
            "model_ms", "prompt_tokens", "completion_tokens",
        ]
    )  # fmt: skip


def run_turns_now(
    *,
    user_id: Any,
    agent_name: Any,
    thread_id: Any,
    project_id: Any = None,
    messages: Any,
    model_output: Any = None,
    model: Any = None,
) -> RunResult:
    """Synchronous ingestion (backfills, demos, `manage.py ingest`): same validation,
    same pipeline and gate, no debounce. The turn is recorded as processed."""
    turn = clean_turn(
        user_id=user_id, agent_name=agent_name, thread_id=thread_id, project_id=project_id, messages=messages
    )
    row = _processing_turn(turn)
    try:
        with claims.keep_alive(row.claimed_by):
            return run_pipeline(
                **_thread(turn),
                project_id=turn.project_id,
                messages=turn.messages,
                model_output=model_output,
                model=model,
                turn_ids=[row.pk],
                claim=row.claimed_by,
            )
    except ExtractionError as exc:
        Turn.objects.filter(pk=row.pk, claimed_by=row.claimed_by, status=Turn.Status.PROCESSING).update(
            status=Turn.Status.PENDING, error=str(exc)[:2000], lease_until=None
        )
        raise


def _processing_turn(turn: CleanTurn) -> Turn:
    """The Turn row of a turn run synchronously (no debounce: it is being processed,
    claimed by this process)."""
    with transaction.atomic():
        # Refused before it is stored (found by tests/test_erasure_process.py: without
        # this, turns refused later in the pipeline stayed behind with their messages).
        refuse_turn(turn.user_id, turn.agent_name, turn.thread_id, turn.project_id)
        return Turn.objects.create(
            **_thread(turn),
            project_id=turn.project_id,
            messages=turn.messages,
            message_ids=turn.message_ids,
            flush=True,
            status=Turn.Status.PROCESSING,
            attempts=1,
            claimed_by=claims.new_token(),
            lease_until=claims.lease_until(),
        )


# Turns per group commit in `run_replays` (`manage.py ingest --batch-size`).
REPLAY_BATCH = 16


def run_replays(turns: Sequence[tuple[CleanTurn, Any]], *, batch_size: int = REPLAY_BATCH) -> list[RunResult]:
    """Replayed turns (validated, each with its model output), run in group commits.

    Each turn is recorded exactly as `run_turns_now` records it (its own Turn,
    ExtractionRun and candidates, judged in order, each seeing what the turns before it
    saved), but up to `batch_size` turns share one `writer.commit`: one batch of fsynced
    files, one transaction, one index update. A group never holds two turns of one
    thread, so a turn always knows which of its message ids an earlier one extracted.
    A failure (the disk, a lock) loses the whole group's runs, never part of one: their
    turns stay `processing` and `retry_failed` returns them to the queue.
    """
    if any(output is None for _turn, output in turns):
        raise TypeError("run_replays needs each turn's model output (run_turns_now calls the model)")
    results: list[RunResult] = []
    group: list[tuple[CleanTurn, Any]] = []
    threads: set[tuple[str, str, str]] = set()
    for turn, output in turns:
        thread = (turn.user_id, turn.agent_name, turn.thread_id)
        if len(group) >= max(1, batch_size) or thread in threads:
            results += _replay_group(group)
            group, threads = [], set()
        group.append((turn, output))
        threads.add(thread)
    if group:
        results += _replay_group(group)
    return results


def _replay_group(group: Sequence[tuple[CleanTurn, Any]]) -> list[RunResult]:
    with transaction.atomic():  # the group's turns and started runs: one commit
        started = []
        for turn, output in group:
            row = _processing_turn(turn)
            started.append(
                _start(
                    **_thread(turn),
                    project_id=turn.project_id,
                    messages=turn.messages,
                    model_output=output,
                    turn_ids=[row.pk],
                    claim=row.claimed_by,
                )
            )
    with claims.keep_alive(*(s.run.claimed_by for s in started)):
        return _apply(started)
