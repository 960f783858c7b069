"""The write gate: deterministic rules, one verdict per candidate, every failed rule named.

`judge_*` are pure functions of a candidate and the filtered conversation. `apply_run`
records every candidate of one extraction run (valid or not, accepted or not) and
writes the accepted ones through `facts.writer` in one batch. `apply_candidate` and
`dismiss_candidate` are the reviewer's approve / correct-and-approve / dismiss.
"""

from __future__ import annotations

import functools
import json
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from . import audit, writer
from .cardfile import Card, Source, now_utc
from .enums import PROFILE_SECTIONS, Authority, CardStatus, Category, Durability, Scope, SourceKind
from .filtering import Row
from .ids import new_fact_id
from .models import AuditEvent, Candidate, ExtractionRun, FactCard
from .profilefile import Profile, Section
from .schemas import Confirmation, FactCandidate, Parsed, SummaryCandidate, normalize_key
from .store import Bucket, Store, get_store

# Stable reason codes (shown in the dashboard, used by tests).
SCOPE_THREAD = "scope_thread"
SCOPE_PROJECT = "scope_project"
TEMPORARY = "temporary"
TRANSACTIONAL = "transactional"
LOW_CONFIDENCE = "low_confidence"
EVIDENCE_MISSING = "evidence_missing"
EVIDENCE_NOT_USER = "evidence_not_user"
DUPLICATE = "duplicate"
INVALID = "invalid"
REASON_CODES: tuple[str, ...] = (
    SCOPE_THREAD, SCOPE_PROJECT, TEMPORARY, TRANSACTIONAL, LOW_CONFIDENCE,
    EVIDENCE_MISSING, EVIDENCE_NOT_USER, DUPLICATE, INVALID,
)  # fmt: skip

REVIEW_AUTO = "auto"
REVIEW_MANUAL = "manual"


# --- pure rules -------------------------------------------------------------------

_WS = re.compile(r"\s+")
_EDGE = "\"'“”‘’「」『』`。．.，,;；:：!！?？ \t\n"


def _norm(text: str) -> str:
    return _WS.sub(" ", unicodedata.normalize("NFKC", text)).strip().casefold()


def same_content(a: str, b: str) -> bool:
    return _norm(a).strip(_EDGE) == _norm(b).strip(_EDGE)


def evidence_reasons(message_id: str, evidence_text: str, rows: Sequence[Row]) -> list[str]:
    """The quote must occur in the named message, and that message must be the user's."""
    row = next((r for r in rows if r["id"] == message_id), None)
    if row is None:
        return [EVIDENCE_MISSING]
    reasons = []
    if row["role"] != "user":
        reasons.append(EVIDENCE_NOT_USER)
    quote = _norm(evidence_text).strip(_EDGE)
    if not quote or quote not in _norm_cached(row["content"]):
        reasons.append(EVIDENCE_MISSING)
    return reasons


@functools.lru_cache(maxsize=256)
def _norm_cached(text: str) -> str:
    # Every candidate of a run quotes the same few messages: normalize each once.
    return _norm(text)


def judge_fact(fact: FactCandidate, rows: Sequence[Row], *, project_id: str | None, threshold: float) -> list[str]:
    reasons = []
    if fact.scope == Scope.THREAD:
        reasons.append(SCOPE_THREAD)
    elif fact.scope == Scope.PROJECT and not project_id:
        reasons.append(SCOPE_PROJECT)
    if fact.durability != Durability.DURABLE:
        reasons.append(TEMPORARY)
    if fact.authority != Authority.DESCRIPTIVE:
        reasons.append(TRANSACTIONAL)
    if not fact.confidence >= threshold:
        reasons.append(LOW_CONFIDENCE)
    reasons += evidence_reasons(fact.evidence_message_id, fact.evidence_text, rows)
    return reasons


def judge_summary(summary: SummaryCandidate, rows: Sequence[Row]) -> list[str]:
    reasons = []
    # Profiles are per user: there is no thread or project profile to put it in.
    if summary.scope == Scope.THREAD:
        reasons.append(SCOPE_THREAD)
    elif summary.scope == Scope.PROJECT:
        reasons.append(SCOPE_PROJECT)
    if summary.authority != Authority.DESCRIPTIVE:
        reasons.append(TRANSACTIONAL)
    reasons += evidence_reasons(summary.evidence_message_id, summary.evidence_text, rows)
    return reasons


def judge_confirmation(confirmation: Confirmation, rows: Sequence[Row]) -> list[str]:
    return evidence_reasons(confirmation.evidence_message_id, confirmation.evidence_text, rows)


def target_bucket(scope: str, *, user_id: str, agent_name: str, project_id: str | None) -> Bucket:
    if scope == Scope.PROJECT and project_id:
        return Bucket(project_id=project_id)
    return Bucket(user_id=user_id, agent_name=agent_name)


# --- bucket state (what is live now, for duplicates and key replacement) -----------


def _bucket_filter(bucket: Bucket) -> dict[str, str]:
    if bucket.user_id is not None:
        return {"user_id": bucket.user_id, "agent_name": bucket.agent_name or "", "project_id": ""}
    return {"user_id": "", "project_id": bucket.project_id or ""}


def content_key(text: str) -> str:
    return _norm(text).strip(_EDGE)


@dataclass
class _Live:
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


class _Plan:
    """Card writes collected for one `writer.commit`, one final state per card id."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.live: dict[Bucket, _Live] = {}
        self.ops: dict[str, writer.Put] = {}

    def bucket(self, bucket: Bucket) -> _Live:
        live = self.live.get(bucket)
        if live is None:
            live = _Live()
            # The mirror is updated under the same lock as the files, so it is current;
            # only the cards that change are read from their files.
            query = FactCard.objects.filter(status=CardStatus.ACTIVE, **_bucket_filter(bucket))
            for fact_id, key, content in query.order_by("created_at").values_list("id", "key", "content"):
                live.add(fact_id, key, content)
            self.live[bucket] = live
        return live

    def card(self, bucket: Bucket, fact_id: str) -> Card | None:
        """The card as this batch will leave it (pending write) or as its file says."""
        pending = self.ops.get(fact_id)
        if pending is not None:
            return pending.card
        card = self.store.read_card(bucket, fact_id)
        return card if card is not None and card.status == CardStatus.ACTIVE else None

    def put(self, card: Card, expected: int | None, reason: str = "") -> None:
        previous = self.ops.get(card.id)
        self.ops[card.id] = writer.Put(card, previous.expected_revision if previous else expected, reason)

    def add_fact(self, bucket: Bucket, card: Card, reason: str = "") -> Card:
        """Write `card`; an active card with the same key is superseded by it."""
        live = self.bucket(bucket)
        old_id = live.keys.get(card.key)
        old = self.card(bucket, old_id) if old_id else None
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

    def confirm(self, bucket: Bucket, card: Card, at: datetime, reason: str = "") -> Card:
        updated = card.model_copy(
            update={"last_confirmed_at": at, "confirmation_count": card.confirmation_count + 1, "updated_at": at}
        )
        self.put(updated, card.revision, reason)
        return updated

    def commit(self, *, actor: str, reason: str, record: Callable[[], object] | None = None) -> None:
        writer.commit(list(self.ops.values()), actor=actor, reason=reason, store=self.store, record=record)


# --- recording + applying a run ---------------------------------------------------


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

    @classmethod
    def from_settings(cls, **kwargs: Any) -> Context:
        kwargs.setdefault("mode", settings.MEMORY_REVIEW_MODE)
        kwargs.setdefault("threshold", settings.MEMORY_CONFIDENCE_THRESHOLD)
        kwargs.setdefault("max_candidates", settings.MEMORY_MAX_CANDIDATES_PER_RUN)
        return cls(**kwargs)


def _text(raw: Any, name: str, limit: int) -> str:
    value = raw.get(name) if isinstance(raw, dict) else None
    return value[:limit] if isinstance(value, str) else ""


def _number(raw: Any, name: str) -> float | None:
    value = raw.get(name) if isinstance(raw, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _json_safe(value: Any) -> Any:
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
        raw=_json_safe(item.raw),
        validation_error=item.error,
        verdict=Candidate.Verdict.REJECTED,
    )
    value = item.value
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


def _new_card(
    *,
    bucket: Bucket,
    key: str,
    content: str,
    category: str,
    confidence: float,
    at: datetime,
    source: Source,
) -> Card:
    return Card(
        id=new_fact_id(),
        key=key,
        category=Category(category),
        confidence=confidence,
        user_id=bucket.user_id,
        agent_name=bucket.agent_name if bucket.user_id is not None else None,
        project_id=bucket.project_id if bucket.user_id is None else None,
        created_at=at,
        updated_at=at,
        source=source,
        content=content,
    )


def _find_confirmed(plan: _Plan, confirmation: Confirmation, ctx: Context) -> tuple[Bucket, Card] | None:
    buckets = [Bucket(user_id=ctx.user_id, agent_name=ctx.agent_name)]
    if ctx.project_id:
        buckets.append(Bucket(project_id=ctx.project_id))
    for bucket in buckets:
        live = plan.bucket(bucket)
        fact_id = confirmation.fact_id if confirmation.fact_id in live.rows else None
        fact_id = fact_id or (live.keys.get(confirmation.key) if confirmation.key else None)
        card = plan.card(bucket, fact_id) if fact_id else None
        if card is not None:
            return bucket, card
    return None


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
        from .erasure.guard import refuse_runs

        refuse_runs([run for run, _parsed, _ctx in runs])
        plan = _Plan(store)
        judged = [_judge_run(plan, run, parsed, ctx) for run, parsed, ctx in runs]
        rows = [row for run_rows in judged for row in run_rows]
        plan.commit(
            actor="extraction",
            reason=f"run {runs[0][0].pk}" if len(runs) == 1 else "extraction",
            record=lambda: record(rows) if record is not None else Candidate.objects.bulk_create(rows),
        )
    return judged


def _judge_run(plan: _Plan, run: ExtractionRun, parsed: Iterable[Parsed], ctx: Context) -> list[Candidate]:
    """Judge one run's candidates into `plan`; its profile changes are written now."""
    store = plan.store
    at = (ctx.now or now_utc()).replace(microsecond=0)
    auto = ctx.mode != REVIEW_MANUAL
    why = f"run {run.pk}"
    rows: list[Candidate] = []
    applied: list[tuple[Candidate, Card]] = []
    summaries: list[tuple[Candidate, SummaryCandidate]] = []
    profile = store.read_profile(ctx.user_id)
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
        elif isinstance(value, FactCandidate):
            reasons = judge_fact(value, ctx.rows, project_id=ctx.project_id, threshold=ctx.threshold)
            if value.scope != Scope.THREAD:
                bucket = target_bucket(value.scope, **_ids(ctx))
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
                    _new_card(
                        bucket=bucket,
                        key=value.key,
                        content=value.content,
                        category=value.category,
                        confidence=value.confidence,
                        at=at,
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
            found = _find_confirmed(plan, value, ctx)
            if found is None:
                reasons.append(INVALID)
                row.validation_error = "names no active fact of this user, agent or project"
            elif any(r.kind == Candidate.Kind.CONFIRMATION and r.fact_id == found[1].id for r in rows[:-1]):
                reasons.append(DUPLICATE)
            if found is not None:
                row.fact_id = found[1].id
            row.reasons = reasons
            if not reasons and auto and found is not None:
                plan.confirm(found[0], found[1], at, why)
        accepted = not row.reasons
        row.verdict = Candidate.Verdict.ACCEPTED if accepted else Candidate.Verdict.REJECTED
        row.review_state = _initial_review_state(accepted, row.reasons, auto)
    for row, card in applied:
        row.fact_id = card.id
    # The profile before the cards: should its write fail, no candidate is recorded yet
    # and the run can be retried as a whole.
    if summaries:
        _write_summaries(ctx.user_id, summaries, run, ctx, at, store)
    return rows


def _ids(ctx: Context) -> dict[str, Any]:
    return {"user_id": ctx.user_id, "agent_name": ctx.agent_name, "project_id": ctx.project_id}


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


# --- review actions -----------------------------------------------------------------


class ReviewError(ValueError):
    """The candidate cannot be approved as it stands (say which field is wrong)."""


_OVERRIDABLE = ("content", "key", "category", "confidence")


def _reviewer(actor: str) -> Any:
    return get_user_model().objects.filter(username=actor).first()


def _corrected(candidate: Candidate, overrides: dict[str, Any]) -> dict[str, Any]:
    unknown = set(overrides) - set(_OVERRIDABLE)
    if unknown:
        raise ReviewError(f"cannot override {', '.join(sorted(unknown))}")
    values = {
        "content": candidate.content,
        "key": candidate.key,
        "category": candidate.category,
        "confidence": candidate.confidence,
    }
    values.update({k: v for k, v in overrides.items() if v is not None})
    content = str(values["content"] or "").strip()
    if not content:
        raise ReviewError("content: a fact needs content")
    key = normalize_key(str(values["key"] or ""))
    if not key or len(key) > 120:
        raise ReviewError("key: 1 to 120 characters")
    if values["category"] not in {c.value for c in Category}:
        raise ReviewError(f"category: one of {', '.join(c.value for c in Category)}")
    try:
        confidence = float(values["confidence"]) if values["confidence"] is not None else None
    except (TypeError, ValueError):
        confidence = None
    if confidence is None or not math.isfinite(confidence) or not 0 <= confidence <= 1:
        raise ReviewError("confidence: a number from 0 to 1")
    return {"content": content, "key": key, "category": values["category"], "confidence": confidence}


def apply_candidate(
    candidate: Candidate,
    *,
    actor: str,
    note: str,
    overrides: dict[str, Any] | None = None,
    store: Store | None = None,
) -> str | None:
    """A reviewer's approve (or correct-and-approve): write the card, record the review.

    The reviewer's judgement replaces the gate's, so the rules are not re-run; key
    replacement and "same content changes nothing" still hold. Returns the fact id
    (None for a profile summary).
    """
    store = store or get_store()
    overrides = overrides or {}
    at = now_utc()
    fact_id: str | None = None
    project_id = candidate.project_id or None
    ids = {"user_id": candidate.user_id, "agent_name": candidate.agent_name, "project_id": project_id}
    source = Source(
        kind=SourceKind.REVIEW,
        run_id=str(candidate.run_id),
        thread_id=candidate.thread_id or None,
        message_id=candidate.evidence_message_id or None,
        evidence_text=candidate.evidence_text or None,
    )
    if candidate.kind == Candidate.Kind.FACT:
        values = _corrected(candidate, overrides)
        bucket = target_bucket(candidate.scope, **ids)
        with store.lock(bucket):
            plan = _Plan(store)
            existing = plan.bucket(bucket).find_content(values["content"])
            if existing is not None:
                fact_id = existing
            else:
                card = _new_card(bucket=bucket, at=at, source=source, **values)
                plan.add_fact(bucket, card)
                plan.commit(actor=actor, reason=note or f"approved candidate {candidate.pk}")
                fact_id = card.id
    elif candidate.kind == Candidate.Kind.SUMMARY:
        if candidate.section not in PROFILE_SECTIONS:
            raise ReviewError("section: not a profile section")
        summary = str(overrides.get("content") or candidate.content).strip()
        if not summary:
            raise ReviewError("content: a summary needs text")

        def change(profile: Profile) -> Profile:
            profile.set_section(
                candidate.section,
                Section(
                    summary=summary,
                    updated_at=at,
                    source=source.model_copy(update={"actor": actor}),
                ),
            )
            return profile

        writer.commit_profile(candidate.user_id, change, actor=actor, reason=note or "approved summary", store=store)
    else:
        confirmation = Confirmation(
            key=candidate.key or None,
            fact_id=candidate.fact_id or candidate.content or None,
            evidence_message_id=candidate.evidence_message_id or "-",
            evidence_text=candidate.evidence_text or "-",
        )
        ctx = Context(rows=[], thread_id=candidate.thread_id, **ids)
        buckets = [Bucket(user_id=candidate.user_id, agent_name=candidate.agent_name)]
        buckets += [Bucket(project_id=project_id)] if project_id else []
        with store.lock(*buckets):
            plan = _Plan(store)
            found = _find_confirmed(plan, confirmation, ctx)
            if found is None:
                raise ReviewError("the confirmed fact is no longer active")
            plan.confirm(found[0], found[1], at)
            plan.commit(actor=actor, reason=note or "approved confirmation")
            fact_id = found[1].id
    _record_review(candidate, Candidate.ReviewState.APPROVED, actor=actor, note=note, fact_id=fact_id)
    action = AuditEvent.Action.CORRECT if overrides else AuditEvent.Action.APPROVE
    audit.record(
        actor,
        action,
        target=f"candidate:{candidate.pk}",
        user_id=candidate.user_id,
        agent_name=candidate.agent_name,
        reason=note,
        kind=candidate.kind,
        fact_id=fact_id,
        overrides=overrides,
    )
    return fact_id


def dismiss_candidate(candidate: Candidate, *, actor: str, note: str) -> None:
    _record_review(candidate, Candidate.ReviewState.DISMISSED, actor=actor, note=note, fact_id=candidate.fact_id)
    audit.record(
        actor,
        AuditEvent.Action.DISMISS,
        target=f"candidate:{candidate.pk}",
        user_id=candidate.user_id,
        agent_name=candidate.agent_name,
        reason=note,
        kind=candidate.kind,
    )


def _record_review(candidate: Candidate, state: str, *, actor: str, note: str, fact_id: str | None) -> None:
    candidate.review_state = state
    candidate.reviewed_by = _reviewer(actor)
    candidate.reviewed_at = timezone.now()
    candidate.review_note = note or ""
    candidate.fact_id = fact_id or ""
    candidate.save(update_fields=["review_state", "reviewed_by", "reviewed_at", "review_note", "fact_id"])
