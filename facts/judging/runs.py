"""Recording and applying one extraction run: every candidate judged, stored and (in auto
mode) written.

`apply_run` / `apply_runs` take what the model proposed (already validated per candidate,
`facts.judging.schemas.Parsed`), judge each candidate with the rules of `facts.judging.gate`, record
every one of them as a `Candidate` row (valid or not, accepted or not, with its raw
form for review) and, in auto review mode, write the accepted ones: profile sections
through `writer.commit_profile`, cards through one `facts.judging.plan.Plan` (one
`writer.commit` for the whole batch). `Context` says whose turn it was and under which
settings it is judged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from facts.enums import Scope, SourceKind
from facts.erasure.guard import refuse_runs
from facts.intake.filtering import Row
from facts.judging.gate import (
    DUPLICATE,
    INVALID,
    judge_confirmation,
    judge_fact,
    judge_summary,
    same_content,
    target_bucket,
)
from facts.judging.plan import Memory, Plan, new_card
from facts.judging.schemas import FactCandidate, Parsed, SummaryCandidate
from facts.models import Candidate, ExtractionRun, GateSettings
from facts.storage import writer
from facts.storage.cardfile import Card, Source, now_utc
from facts.storage.fileread import too_large
from facts.storage.profilefile import Profile, Section
from facts.storage.store import Bucket, Store, get_store

# MEMORY_REVIEW_MODE: `auto` writes accepted candidates at once; `manual` leaves them
# pending for a reviewer's approval (`facts.curation.review`).
REVIEW_AUTO = "auto"
REVIEW_MANUAL = "manual"


@dataclass
class Context:
    user_id: str
    agent_name: str
    thread_id: str
    project_id: str | None
    rows: Sequence[Row]
    mode: str = REVIEW_AUTO
    threshold: float = 0.7
    now: datetime | None = None
    max_candidates: int = 100
    # Message id → when it was said (`facts.intake.turns.said_times`): a card takes its evidence
    # message's time as its created_at; messages without one are dated `now`.
    said_at: Mapping[str, datetime] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, **kwargs: Any) -> Context:
        kwargs.setdefault("mode", settings.MEMORY_REVIEW_MODE)
        if "threshold" not in kwargs:
            kwargs["threshold"] = threshold_in_force()
        kwargs.setdefault("max_candidates", settings.MEMORY_MAX_CANDIDATES_PER_RUN)
        return cls(**kwargs)

    def ids(self) -> dict[str, Any]:
        return {"user_id": self.user_id, "agent_name": self.agent_name, "project_id": self.project_id}


def threshold_in_force() -> float:
    """The threshold an administrator applied from the dashboard, else the setting."""
    row = GateSettings.objects.filter(pk=1).values_list("threshold", flat=True).first()
    return row if row is not None else settings.MEMORY_CONFIDENCE_THRESHOLD


# --- the Candidate row of what the model sent ----------------------------------------


def _text(raw: Any, name: str, limit: int) -> str:
    value = raw.get(name) if isinstance(raw, dict) else None
    return value[:limit] if isinstance(value, str) else ""


def _number(raw: Any, name: str) -> float | None:
    value = raw.get(name) if isinstance(raw, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def json_safe(value: Any) -> Any:
    """NaN/Infinity are not JSON; keep them readable in the raw column."""
    try:
        json.dumps(value, allow_nan=False)  # in C: nearly every model output is plain JSON
    except (TypeError, ValueError):
        return _json_safe_walk(value)
    return value


def _json_safe_walk(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _json_safe_walk(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe_walk(v) for v in value]
    return value


def _candidate_row(run: ExtractionRun, item: Parsed, ctx: Context) -> Candidate:
    row = Candidate(
        run=run,
        kind=item.kind,
        position=item.position,
        user_id=ctx.user_id,
        agent_name=ctx.agent_name,
        thread_id=ctx.thread_id,
        project_id=ctx.project_id or "",
        raw=json_safe(item.raw),
        validation_error=item.error,
        verdict=Candidate.Verdict.REJECTED,
    )
    value = item.value
    evidence = value.evidence_message_id if value is not None else _text(item.raw, "evidence_message_id", 200)
    row.said_at = ctx.said_at.get(evidence) if evidence else None
    if value is None:
        raw = item.raw
        row.key = _text(raw, "key", 200)
        row.section = _text(raw, "section", 32)
        row.content = _text(raw, "content", 4000) or _text(raw, "summary", 4000)
        row.category = _text(raw, "category", 16)
        row.scope = _text(raw, "scope", 16)
        row.durability = _text(raw, "durability", 16)
        row.authority = _text(raw, "authority", 16)
        row.confidence = _number(raw, "confidence")
        row.evidence_message_id = _text(raw, "evidence_message_id", 200)
        row.evidence_text = _text(raw, "evidence_text", 4000)
        return row
    row.evidence_message_id = value.evidence_message_id
    row.evidence_text = value.evidence_text
    if isinstance(value, FactCandidate):
        row.key, row.content, row.category = value.key, value.content, value.category.value
        row.scope, row.durability, row.authority = value.scope.value, value.durability.value, value.authority.value
        row.confidence = value.confidence
    elif isinstance(value, SummaryCandidate):
        row.section, row.content = value.section, value.summary
        row.scope, row.authority = value.scope.value, value.authority.value
    else:
        row.key = value.key or ""
        row.content = value.fact_id or ""
    return row


# --- judging and applying ------------------------------------------------------------


def apply_run(
    run: ExtractionRun,
    parsed: Iterable[Parsed],
    ctx: Context,
    *,
    store: Store | None = None,
    record: Callable[[list[Candidate]], None] | None = None,
) -> list[Candidate]:
    """Judge, record and (in auto mode) apply every candidate of one run.

    Nothing the model proposed is thrown away: invalid and rejected candidates are
    stored with their raw form for review. Profile changes go out in one
    `writer.commit_profile`, then card writes in one `writer.commit`. `record(rows)`
    saves the Candidate rows (default: `bulk_create`), with whatever else the caller
    wants committed with them; it runs in the transaction of the cards' mirror rows,
    which commits only once the card files are durable.
    """
    return apply_runs([(run, parsed, ctx)], store=store, record=record)[0]


def apply_runs(
    runs: Sequence[tuple[ExtractionRun, Iterable[Parsed], Context]],
    *,
    store: Store | None = None,
    record: Callable[[list[Candidate]], None] | None = None,
) -> list[list[Candidate]]:
    """`apply_run` for several runs at once (a backfill's group commit).

    The runs are judged in order, each seeing what the ones before it accepted (a key
    they replaced, a content they saved), and their card writes go out in a single
    `writer.commit`: one batch of files, one transaction for every run's records and
    mirror rows, one index update. Each card's history names its own run. Returns
    each run's candidates; `record` gets all of them.
    """
    store = store or get_store()
    buckets = set()
    for _run, _parsed, ctx in runs:
        buckets.add(Bucket(user_id=ctx.user_id, agent_name=ctx.agent_name))
        if ctx.project_id:
            buckets.add(Bucket(project_id=ctx.project_id))
    with store.lock(*buckets):
        # Under the locks an erasure holds while it deletes the user's files: a run whose
        # user is being erased, or whose run row an erasure already removed (a model
        # call that outlived the whole erasure), writes nothing.
        refuse_runs([run for run, _parsed, _ctx in runs])
        # Taken under the locks, before planning: every revision committed earlier is
        # older than this, every later one newer. It is what `facts.judging.backtest` replays
        # a candidate against, with the settings it was judged under.
        judged_at = timezone.now()
        plan = Plan(store)
        judged = []
        for run, parsed, ctx in runs:
            at = ctx_at(ctx)
            rows, summaries = _judge_run(plan, run, parsed, ctx, at)
            # The profile before the cards: should its write fail, no candidate is
            # recorded yet and the run can be retried as a whole.
            if summaries:
                _write_summaries(ctx.user_id, summaries, run, ctx, at, store)
            judged.append(rows)
        rows = [row for run_rows in judged for row in run_rows]

        def save() -> None:
            # One UPDATE per setting judged under (one, unless the settings differ).
            settings_of: dict[tuple[float, str], list[int]] = {}
            for run, _parsed, ctx in runs:
                run.judged_at, run.threshold, run.review_mode = judged_at, ctx.threshold, ctx.mode
                settings_of.setdefault((ctx.threshold, ctx.mode), []).append(run.pk)
            for (threshold, mode), pks in settings_of.items():
                ExtractionRun.objects.filter(pk__in=pks).update(
                    judged_at=judged_at, threshold=threshold, review_mode=mode
                )
            if record is not None:
                record(rows)
            else:
                Candidate.objects.bulk_create(rows)

        plan.commit(actor="extraction", reason=f"run {runs[0][0].pk}" if len(runs) == 1 else "extraction", record=save)
    return judged


def judge(
    run: ExtractionRun, parsed: Iterable[Parsed], ctx: Context, memory: Memory, *, plan: Plan | None = None
) -> list[Candidate]:
    """The verdicts `apply_run` would give, judged against `memory`, writing nothing:
    the Candidate rows are returned unsaved (`facts.judging.backtest`). `plan`: the plan of the
    runs judged before this one in the same batch (`apply_runs`), whose accepted cards
    this one saw."""
    plan = plan or Plan(get_store(), memory)
    rows, _summaries = _judge_run(plan, run, parsed, ctx, ctx_at(ctx))
    return rows


def ctx_at(ctx: Context) -> datetime:
    return (ctx.now or now_utc()).replace(microsecond=0)


def _judge_run(
    plan: Plan, run: ExtractionRun, parsed: Iterable[Parsed], ctx: Context, at: datetime
) -> tuple[list[Candidate], list[tuple[Candidate, SummaryCandidate]]]:
    """Judge one run's candidates into `plan`; returns them and the profile changes to
    write (stamped `at`, like its cards)."""
    auto = ctx.mode != REVIEW_MANUAL
    why = f"run {run.pk}"
    rows: list[Candidate] = []
    applied: list[tuple[Candidate, Card]] = []
    summaries: list[tuple[Candidate, SummaryCandidate]] = []
    profile = plan.memory.read_profile(ctx.user_id)
    for number, item in enumerate(parsed):
        row = _candidate_row(run, item, ctx)
        rows.append(row)
        value = item.value
        if number >= ctx.max_candidates:
            # A model that floods a run is not believed past the limit; what it sent
            # is still recorded for review.
            row.reasons = [INVALID]
            row.validation_error = (
                f"beyond the limit of {ctx.max_candidates} candidates in one run "
                "(MEMORY_MAX_CANDIDATES_PER_RUN): recorded, not judged"
            )
        elif value is None:
            row.reasons = [INVALID]
        elif isinstance(value, FactCandidate) and (problem := _too_large_for_a_card(value)):
            # Judged alone, as any bad candidate: the card it would make could not be
            # written (facts/storage/fileread.py), and a write that fails would fail the run.
            row.reasons = [INVALID]
            row.validation_error = problem
        elif isinstance(value, FactCandidate):
            reasons = judge_fact(value, ctx.rows, project_id=ctx.project_id, threshold=ctx.threshold)
            if value.scope != Scope.THREAD:
                bucket = target_bucket(value.scope, **ctx.ids())
                if plan.bucket(bucket).find_content(value.content) is not None:
                    reasons.append(DUPLICATE)
            row.reasons = reasons
            if not reasons and auto:
                source = Source(
                    kind=SourceKind.EXTRACTION,
                    run_id=str(run.pk),
                    thread_id=ctx.thread_id or None,
                    message_id=value.evidence_message_id,
                    evidence_text=value.evidence_text,
                )
                card = plan.add_fact(
                    bucket,
                    new_card(
                        bucket=bucket,
                        key=value.key,
                        content=value.content,
                        category=value.category,
                        confidence=value.confidence,
                        at=at,
                        said_at=row.said_at,
                        source=source,
                    ),
                    why,
                )
                applied.append((row, card))
        elif isinstance(value, SummaryCandidate):
            reasons = judge_summary(value, ctx.rows)
            pending = next((s.summary for _, s in reversed(summaries) if s.section == value.section), None)
            current = pending if pending is not None else profile.section(value.section).summary
            if current and same_content(current, value.summary):
                reasons.append(DUPLICATE)
            row.reasons = reasons
            if not reasons and auto:
                summaries.append((row, value))
        else:
            reasons = judge_confirmation(value, ctx.rows)
            found = plan.find_confirmed(value, **ctx.ids())
            if found is None:
                reasons.append(INVALID)
                row.validation_error = "names no active fact of this user, agent or project"
            elif any(r.kind == Candidate.Kind.CONFIRMATION and r.fact_id == found[1].id for r in rows[:-1]):
                reasons.append(DUPLICATE)
            if found is not None:
                row.fact_id = found[1].id
            row.reasons = reasons
            if not reasons and auto and found is not None:
                plan.confirm(found[0], found[1], at, why, said_at=row.said_at)
        accepted = not row.reasons
        row.verdict = Candidate.Verdict.ACCEPTED if accepted else Candidate.Verdict.REJECTED
        row.review_state = _initial_review_state(accepted, row.reasons, auto)
    for row, card in applied:
        row.fact_id = card.id
    return rows, summaries


# What a card's file holds besides its content, key and evidence (front matter, ids),
# generously: ids are at most API_MAX_ID_CHARS (200) each.
_CARD_OVERHEAD_BYTES = 2048


def _too_large_for_a_card(value: FactCandidate) -> str | None:
    size = sum(len(part.encode("utf-8")) for part in (value.content, value.evidence_text, value.key))
    problem = too_large(size + _CARD_OVERHEAD_BYTES)
    return problem and f"its card would be too large: {problem.replace('the card is', 'about')}"


def _initial_review_state(accepted: bool, reasons: list[str], auto: bool) -> str:
    if accepted:
        return Candidate.ReviewState.NONE if auto else Candidate.ReviewState.PENDING
    # A pure repeat of what is already stored needs nobody's attention.
    if reasons == [DUPLICATE]:
        return Candidate.ReviewState.NONE
    return Candidate.ReviewState.PENDING


def _write_summaries(
    user_id: str,
    summaries: Sequence[tuple[Candidate, SummaryCandidate]],
    run: ExtractionRun,
    ctx: Context,
    at: datetime,
    store: Store,
) -> None:
    def change(profile: Profile) -> Profile:
        for _, summary in summaries:
            # Replaced, never appended: a finished focus must not linger in topOfMind.
            profile.set_section(
                summary.section,
                Section(
                    summary=summary.summary,
                    updated_at=at,
                    source=Source(
                        kind=SourceKind.EXTRACTION,
                        run_id=str(run.pk),
                        thread_id=ctx.thread_id or None,
                        message_id=summary.evidence_message_id,
                        evidence_text=summary.evidence_text,
                    ),
                ),
            )
        return profile

    writer.commit_profile(user_id, change, actor="extraction", reason=f"run {run.pk}", store=store)
