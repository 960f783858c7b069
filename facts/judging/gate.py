"""The gate's rules: deterministic, one verdict per candidate, every failed rule named.

`judge_*` are pure functions of a candidate and the filtered conversation; each returns
the list of reason codes it failed (empty: accepted). `REASON_CODES` are the stable
codes the dashboard shows and filters by. Recording a run's candidates and writing the
accepted ones is `facts.judging.runs`; a reviewer's approve / dismiss is `facts.curation.review`.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence

from facts.enums import Authority, Durability, Scope
from facts.intake.filtering import Row
from facts.judging import wording
from facts.judging.schemas import Confirmation, FactCandidate, SummaryCandidate
from facts.storage.store import Bucket

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
# The fact's own words (facts/judging/wording.py): pointing outside itself, saying what the
# evidence does not, or using a single-valued key for something else.
DANGLING_REFERENCE = "dangling_reference"
UNGROUNDED = "ungrounded"
KEY_MISMATCH = "key_mismatch"
REASON_CODES: tuple[str, ...] = (
    SCOPE_THREAD, SCOPE_PROJECT, TEMPORARY, TRANSACTIONAL, LOW_CONFIDENCE,
    EVIDENCE_MISSING, EVIDENCE_NOT_USER, DANGLING_REFERENCE, UNGROUNDED, KEY_MISMATCH, DUPLICATE, INVALID,
)  # fmt: skip

# --- pure rules -------------------------------------------------------------------

_WS = re.compile(r"\s+")
_EDGE = "\"'“”‘’「」『』`。．.，,;；:：!！?？ \t\n"


def _norm(text: str) -> str:
    return _WS.sub(" ", unicodedata.normalize("NFKC", text)).strip().casefold()


def content_key(text: str) -> str:
    """Content compared the way duplicates are found: normalized, edges stripped."""
    return _norm(text).strip(_EDGE)


def same_content(a: str, b: str) -> bool:
    return content_key(a) == content_key(b)


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
    evidence = evidence_reasons(fact.evidence_message_id, fact.evidence_text, rows)
    said = None
    if not evidence:
        said = next(r["content"] for r in rows if r["id"] == fact.evidence_message_id)
    return reasons + evidence + wording_reasons(fact, said=said, project_id=project_id)


def wording_reasons(fact: FactCandidate, *, said: str | None, project_id: str | None = None) -> list[str]:
    """What the fact's own words fail: self-contained; grounded in the user's message
    that holds the quote (`said`; None when the evidence check already failed, and the
    turn's project id counts as said: "this repo" is that project); its key."""
    reasons = []
    if wording.dangling_words(fact.content):
        reasons.append(DANGLING_REFERENCE)
    if said is not None and wording.ungrounded_words(fact.content, said + " " + (project_id or "")):
        reasons.append(UNGROUNDED)
    if wording.key_mismatch(fact.key, fact.content):
        reasons.append(KEY_MISMATCH)
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
