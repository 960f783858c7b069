"""The extraction pipeline of a thread's turns: filter → extract (or replay) → gate → write.

    run_pipeline ──► filter ──► extract (or replay `model_output`) ──► facts.judging.runs ──► writer

Every run is recorded as an `ExtractionRun` under the claim of the turns it processes
(`facts.intake.claims`). A message id that has been fed to extraction is recorded in
`ExtractedMessage` and never fed again, whichever path (normal turn, summarization
flush, replay) brings it back. `run_pipeline` is what the worker (`facts.tasks`) runs
for a thread; `run_turns_now` and `run_replays` are the synchronous doors (backfills,
demos, ``manage.py ingest``). A failed model call raises `ExtractionError` with the run
recorded as failed: the caller decides what happens to the turns.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from langchain_core.messages import BaseMessage, messages_from_dict

from facts import tenancy
from facts.enums import PROFILE_SECTIONS
from facts.erasure.guard import refuse_turn
from facts.intake import claims
from facts.intake.filtering import Row, filter_messages, has_user_text, to_message
from facts.intake.turns import CleanTurn, clean_turn, said_times
from facts.judging.extraction import ExtractionError, extract, extractor_for, model_name_for
from facts.judging.runs import Context, apply_runs, json_safe
from facts.judging.schemas import Parsed, parse_update
from facts.models import Candidate, ExtractedMessage, ExtractionRun, FactCard, Turn
from facts.storage import bulk
from facts.storage.store import get_store


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


# The status of a RunResult whose claim lapsed and was taken over before it wrote.
LOST = "lost"
LOST_ERROR = "lease lost: the claim lapsed and another worker took these turns over; nothing was written"

# --- one run ------------------------------------------------------------------------


def _reference(user_id: str, agent_name: str, project_id: str) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """What the model may compare against (never evidence): profile and live facts."""
    profile = get_store().read_profile(user_id)
    summaries = {name: profile.section(name).summary for name in PROFILE_SECTIONS}
    query = Q(user_id=user_id, agent_name=agent_name, project_id="")
    if project_id:
        query |= Q(user_id="", project_id=project_id)
    facts = FactCard.objects.filter(query, status="active").order_by("-updated_at")
    return summaries, cast(list[dict[str, Any]], list(facts.values("id", "key", "content", "category")[:200]))


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
    said = said_times(fresh)
    replay = model_output is not None
    with transaction.atomic():
        # The run holds the user's words: never recorded once an erasure has begun.
        refuse_turn(user_id, agent_name, thread_id, project_id or "")
        run = ExtractionRun.objects.create(
            user_id=user_id,
            agent_name=agent_name,
            thread_id=thread_id,
            project_id=project_id or "",
            filtered_rows=_recorded_rows(rows, said),
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
            run.request = exc.request
            run.raw_output = json_safe(exc.raw) if exc.raw is not None else None
            _finish(run, ExtractionRun.Status.FAILED, started)
            raise
        parsed = extraction.parsed
        run.request = extraction.request
        run.raw_output = json_safe(extraction.arguments)
        run.model_ms = extraction.model_ms
        run.prompt_tokens = extraction.prompt_tokens
        run.completion_tokens = extraction.completion_tokens
        run.model_name = extraction.model_name or run.model_name
    ctx = Context.from_settings(
        user_id=user_id,
        agent_name=agent_name,
        thread_id=thread_id,
        project_id=project_id or None,
        rows=rows,
        now=now,
        said_at=said,
    )
    return _Started(run, result, ctx, parsed, fed, turn_ids, started)


def _recorded_rows(rows: Sequence[Row], said: Mapping[str, datetime]) -> list[dict[str, Any]]:
    """The rows as the run records them: with when each was said, where the turn said
    so (the model is shown the rows without it)."""
    return [
        {**row, "said_at": said[row["id"]].isoformat().replace("+00:00", "Z")} if row["id"] in said else dict(row)
        for row in rows
    ]


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
            "status", "finished_at", "duration_ms", "error", "request", "raw_output", "model_name",
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
    created_at: Any = None,
) -> RunResult:
    """Synchronous ingestion (backfills, demos, `manage.py ingest`): same validation,
    same pipeline and gate, no debounce. The turn is recorded as processed; `created_at`
    is when it was said (`facts.intake.turns.clean_turn`)."""
    turn = clean_turn(
        user_id=user_id,
        agent_name=agent_name,
        thread_id=thread_id,
        project_id=project_id,
        messages=messages,
        created_at=created_at,
    )
    row = _processing_turn(turn)
    try:
        with claims.keep_alive(row.claimed_by):
            return run_pipeline(
                **turn.thread(),
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
    tenancy.check(turn.user_id, turn.project_id)
    with transaction.atomic():
        # Refused before it is stored (found by tests/test_erasure_process.py: without
        # this, turns refused later in the pipeline stayed behind with their messages).
        refuse_turn(turn.user_id, turn.agent_name, turn.thread_id, turn.project_id)
        return Turn.objects.create(
            **turn.thread(),
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
                    **turn.thread(),
                    project_id=turn.project_id,
                    messages=turn.messages,
                    model_output=output,
                    turn_ids=[row.pk],
                    claim=row.claimed_by,
                )
            )
    with claims.keep_alive(*(s.run.claimed_by for s in started)):
        return _apply(started)
