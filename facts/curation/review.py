"""A reviewer's decisions on a candidate: approve, correct-and-approve, dismiss, undo.

Which candidates may be reviewed is decided here (`is_reviewable`, `REVIEWABLE`) and
checked by every decision, whichever door asks: one waiting for a reviewer, or one the
gate rejected that nobody has reviewed yet. The reviewer's judgement replaces the
gate's, so the rules of `facts.judging.gate` are not re-run; key replacement and "same content
changes nothing" still hold (`facts.judging.plan`). Each decision writes through
`facts.storage.writer`, records the review on the `Candidate` row and leaves an `AuditEvent`.
"""

from __future__ import annotations

import math
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone

from facts import audit, tenancy
from facts.enums import PROFILE_SECTIONS, Category, SourceKind
from facts.judging.gate import target_bucket
from facts.judging.plan import Plan, new_card
from facts.judging.schemas import Confirmation, normalize_key
from facts.models import AuditEvent, Candidate
from facts.storage import writer
from facts.storage.cardfile import Source, now_utc
from facts.storage.profilefile import Profile, Section
from facts.storage.store import Bucket, Store, get_store


class ReviewError(ValueError):
    """The candidate cannot be approved as it stands (say which field is wrong)."""


class NotReviewable(ReviewError):
    """The candidate is not open for review (the gate wrote it, or a reviewer decided)."""


# The candidates a reviewer may approve or dismiss, as a query (`is_reviewable` for one).
REVIEWABLE = Q(review_state=Candidate.ReviewState.PENDING) | Q(
    verdict=Candidate.Verdict.REJECTED, review_state=Candidate.ReviewState.NONE
)


def is_reviewable(candidate: Candidate) -> bool:
    """Waiting for a reviewer, or rejected by the gate and not reviewed yet."""
    return candidate.review_state == Candidate.ReviewState.PENDING or (
        candidate.verdict == Candidate.Verdict.REJECTED and candidate.review_state == Candidate.ReviewState.NONE
    )


def not_reviewable_reason(candidate: Candidate) -> str:
    """Why approve/dismiss is refused, in the same words as the candidate's badge."""
    if candidate.review_state == Candidate.ReviewState.NONE:
        return "The gate accepted this candidate and wrote it already: there is nothing to approve or dismiss."
    return f"This candidate was already {candidate.review_state} by a reviewer."


def check_reviewable(candidate: Candidate) -> None:
    """`NotReviewable`, saying why, unless the candidate is open for review."""
    if not is_reviewable(candidate):
        raise NotReviewable(not_reviewable_reason(candidate))


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
    (None for a profile summary). `NotReviewable` when it is not open for review.
    """
    check_reviewable(candidate)
    store = store or get_store()
    overrides = overrides or {}
    at = now_utc()
    fact_id: str | None = None
    project_id = candidate.project_id or None
    if project_id and not tenancy.may_use(candidate.user_id, project_id):
        # A candidate from before the tenant walls (facts/tenancy.py): nothing of it may
        # be read from or written into a project its user's tenant may not use.
        if candidate.kind == Candidate.Kind.FACT and candidate.scope == "project":
            raise ReviewError(f"project: {project_id!r} belongs to another tenant than {candidate.user_id!r}")
        project_id = None
    ids: dict[str, Any] = {"user_id": candidate.user_id, "agent_name": candidate.agent_name, "project_id": project_id}
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
            plan = Plan(store)
            existing = plan.bucket(bucket).find_content(values["content"])
            if existing is not None:
                fact_id = existing
            else:
                card = new_card(bucket=bucket, at=at, said_at=candidate.said_at, source=source, **values)
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
        buckets = [Bucket(user_id=candidate.user_id, agent_name=candidate.agent_name)]
        buckets += [Bucket(project_id=project_id)] if project_id else []
        with store.lock(*buckets):
            plan = Plan(store)
            found = plan.find_confirmed(confirmation, **ids)
            if found is None:
                raise ReviewError("the confirmed fact is no longer active")
            plan.confirm(found[0], found[1], at, said_at=candidate.said_at)
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
    """A reviewer's dismiss: nothing is written, the review is recorded and audited
    (with the state an undo puts back). `NotReviewable` when it is not open for review."""
    check_reviewable(candidate)
    previous = candidate.review_state
    _record_review(candidate, Candidate.ReviewState.DISMISSED, actor=actor, note=note, fact_id=candidate.fact_id)
    audit.record(
        actor,
        AuditEvent.Action.DISMISS,
        target=f"candidate:{candidate.pk}",
        user_id=candidate.user_id,
        agent_name=candidate.agent_name,
        reason=note,
        kind=candidate.kind,
        previous_state=previous,  # what an undo puts back (restore_candidate)
    )


def _record_review(candidate: Candidate, state: str, *, actor: str, note: str, fact_id: str | None) -> None:
    candidate.review_state = state
    candidate.reviewed_by = _reviewer(actor)
    candidate.reviewed_at = timezone.now()
    candidate.review_note = note or ""
    candidate.fact_id = fact_id or ""
    candidate.save(update_fields=["review_state", "reviewed_by", "reviewed_at", "review_note", "fact_id"])


def restore_candidate(candidate: Candidate, *, actor: str, note: str = "") -> bool:
    """Undo a dismissal: the candidate waits for review again, in the state it had.

    Audited as a restore. Returns False (and changes nothing) when the candidate is no
    longer dismissed, e.g. another reviewer restored it first.
    """
    dismissal = (
        AuditEvent.objects.filter(action=AuditEvent.Action.DISMISS, target=f"candidate:{candidate.pk}")
        .order_by("-pk")
        .first()
    )
    back_to = (dismissal.details or {}).get("previous_state") if dismissal else None
    if back_to not in (Candidate.ReviewState.NONE, Candidate.ReviewState.PENDING):
        # Dismissed before the state was recorded: a rejected candidate sat in the queue
        # unreviewed, anything else was held pending.
        back_to = (
            Candidate.ReviewState.NONE
            if candidate.verdict == Candidate.Verdict.REJECTED
            else Candidate.ReviewState.PENDING
        )
    # One conditional UPDATE: two reviewers undoing at once restore it once.
    changed = Candidate.objects.filter(pk=candidate.pk, review_state=Candidate.ReviewState.DISMISSED).update(
        review_state=back_to, reviewed_by=None, reviewed_at=None, review_note=""
    )
    if not changed:
        return False
    candidate.refresh_from_db()
    audit.record(
        actor,
        AuditEvent.Action.RESTORE,
        target=f"candidate:{candidate.pk}",
        user_id=candidate.user_id,
        agent_name=candidate.agent_name,
        reason=note,
        kind=candidate.kind,
    )
    return True
