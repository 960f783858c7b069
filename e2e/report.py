"""What `make e2e-llm` counts and what it insists on, kept apart from Django and the model.

The harness turns DB rows and memory files into the plain records below; everything
here is pure so that `tests/test_e2e_harness.py` can check it in `make test` without a
model.
"""

from __future__ import annotations

import re
import statistics
import unicodedata
from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Message:
    """A message of a scripted conversation, as the agent sent it."""

    id: str
    role: str  # "user", "assistant", "tool", "system"
    content: str


@dataclass(frozen=True)
class Call:
    """One extraction attempt for one conversation.

    ``outcome``: ``update`` (a validated MemoryUpdate came back), ``error`` (an
    ExtractionError was recorded), ``skipped`` (nothing left after filtering, so no model
    call), ``crash`` (any other exception escaped) or ``none`` (the call ended with
    neither an update nor a recorded error).
    """

    conversation: str
    outcome: str
    seconds: float | None = None
    run_ids: tuple[int, ...] = ()
    error: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    @property
    def called_model(self) -> bool:
        return self.outcome in ("update", "error", "none")


@dataclass(frozen=True)
class CandidateRow:
    id: int
    run_id: int
    kind: str
    label: str  # key of a fact, section of a summary, target of a confirmation
    content: str
    verdict: str
    reasons: tuple[str, ...]
    confidence: float | None = None
    evidence_message_id: str = ""
    evidence_text: str = ""
    validation_error: str = ""


@dataclass(frozen=True)
class StoredMemory:
    """A fact card or a profile section that extraction wrote."""

    kind: str  # "card" or "section"
    id: str  # fact id, or "user_id:section"
    content: str
    thread_id: str
    message_id: str
    evidence_text: str
    confidence: float | None = None


@dataclass
class Summary:
    calls: int
    skipped: int
    errors: int
    latencies: list[float]
    proposed: int
    accepted: int
    rejected: int
    rejected_by_reason: Counter[str]
    invalid: int
    stored: int
    by_kind: Counter[str] = field(default_factory=Counter)


def summarize(calls: list[Call], candidates: list[CandidateRow], stored: list[StoredMemory]) -> Summary:
    rejected = [c for c in candidates if c.verdict == "rejected"]
    reasons: Counter[str] = Counter()
    for candidate in rejected:
        reasons.update(candidate.reasons)
    return Summary(
        calls=sum(1 for c in calls if c.called_model),
        skipped=sum(1 for c in calls if c.outcome == "skipped"),
        errors=sum(1 for c in calls if c.outcome == "error"),
        latencies=[c.seconds for c in calls if c.called_model and c.seconds is not None],
        proposed=len(candidates),
        accepted=sum(1 for c in candidates if c.verdict == "accepted"),
        rejected=len(rejected),
        rejected_by_reason=reasons,
        invalid=sum(1 for c in candidates if "invalid" in c.reasons),
        stored=len(stored),
        by_kind=Counter(c.kind for c in candidates),
    )


# --- assertions ----------------------------------------------------------------------


def check_calls(calls: list[Call]) -> list[str]:
    """Every call ends in a validated update or a recorded error: no crash, no silent None."""
    problems = []
    for call in calls:
        if call.outcome == "crash":
            problems.append(f"{call.conversation}: the pipeline crashed: {call.error}")
        elif call.outcome == "none":
            problems.append(f"{call.conversation}: the call returned neither an update nor a recorded error")
        elif call.outcome == "error" and not call.error.strip():
            problems.append(f"{call.conversation}: the extraction failed without a recorded error")
        elif call.outcome not in ("update", "error", "skipped"):
            problems.append(f"{call.conversation}: unknown outcome {call.outcome!r}")
    # Recorded errors are fine one by one; all of them means the chain was never proven
    # (wrong method for the server, server down, max_tokens too small for any answer).
    if any(c.called_model for c in calls) and not any(c.outcome == "update" for c in calls):
        problems.append("no model call returned a validated update: the real chain was not exercised")
    return problems


def check_evidence(stored: list[StoredMemory], conversations: dict[str, list[Message]]) -> list[str]:
    """No memory is stored unless its evidence is the user's own words.

    ``conversations`` maps thread id → the messages as sent. The evidence must be a
    non-empty substring of the *user* message its ``message_id`` names, in that thread,
    up to width, case, runs of whitespace and the punctuation around the quote. This is
    written independently of the gate on purpose: it checks the gate, not itself.
    """
    problems = []
    for item in stored:
        where = f"{item.kind} {item.id}"
        messages = {m.id: m for m in conversations.get(item.thread_id, [])}
        message = messages.get(item.message_id)
        if not item.evidence_text.strip():
            problems.append(f"{where}: stored without evidence")
        elif message is None:
            problems.append(f"{where}: evidence names message {item.message_id!r}, not in thread {item.thread_id!r}")
        elif message.role != "user":
            problems.append(f"{where}: evidence comes from a {message.role} message ({message.id})")
        elif not quotes(message.content, item.evidence_text):
            problems.append(f"{where}: evidence {item.evidence_text!r} is not in user message {message.id}")
    return problems


_SPACE = re.compile(r"\s+")
_QUOTE_EDGES = " \"'“”‘’「」『』`.,;:!?。，；：！？、"


def _plain(text: str) -> str:
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip().casefold()


def quotes(message: str, evidence: str) -> bool:
    """Whether ``evidence`` is the user's own words from ``message``."""
    quote = _plain(evidence).strip(_QUOTE_EDGES)
    return bool(quote) and quote in _plain(message)


def check_queue(
    run_ids: list[int],
    candidate_ids: list[int],
    queued_run_ids: set[int],
    queued_candidate_ids: set[int],
    page_text: str | None = None,
) -> list[str]:
    """Every run and every candidate is visible where reviewers look.

    ``queued_*``: what the review queue's own queries return. ``page_text``: the review
    queue page as a logged-in reviewer sees it (None when the page does not exist yet);
    each candidate must be linked or named there.
    """
    problems = [f"run {rid} is not in the review queue's runs" for rid in run_ids if rid not in queued_run_ids]
    problems += [
        f"candidate {cid} is not in the review queue's candidates"
        for cid in candidate_ids
        if cid not in queued_candidate_ids
    ]
    if page_text is not None:
        problems += [
            f"candidate {cid} does not appear on the review queue page"
            for cid in candidate_ids
            if not _mentions(page_text, cid)
        ]
    return problems


def _mentions(page_text: str, candidate_id: int) -> bool:
    needles = (
        f"/candidates/{candidate_id}/",
        f"/review/{candidate_id}/",
        f'data-candidate="{candidate_id}"',
        f'data-candidate-id="{candidate_id}"',
        f'id="candidate-{candidate_id}"',
        f"candidate={candidate_id}",
    )
    return any(needle in page_text for needle in needles)


# --- the printed report --------------------------------------------------------------


def _seconds(values: list[float]) -> str:
    if not values:
        return "no model calls"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return (
        f"mean {statistics.fmean(values):.1f} s, median {statistics.median(values):.1f} s, "
        f"p95 {p95:.1f} s, max {ordered[-1]:.1f} s, total {sum(values):.1f} s"
    )


def _short(text: str, limit: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render(
    summary: Summary,
    calls: list[Call],
    candidates: list[CandidateRow],
    stored: list[StoredMemory],
    problems: list[str],
    *,
    model: str = "",
    method: str = "",
) -> str:
    lines = ["", "== e2e-llm report" + (f": {model} via {method}" if model else "")]
    lines.append(
        f"calls: {summary.calls} model calls, {summary.errors} recorded ExtractionErrors, "
        f"{summary.skipped} conversations skipped before the model"
    )
    lines.append(f"latency per call: {_seconds(summary.latencies)}")
    for call in calls:
        took = "—" if call.seconds is None else f"{call.seconds:6.1f} s"
        tokens = ""
        if call.prompt_tokens is not None or call.completion_tokens is not None:
            tokens = f"  tokens {call.prompt_tokens}→{call.completion_tokens}"
        detail = f"  {_short(call.error, 110)}" if call.error else ""
        lines.append(f"  {call.conversation:<28} {call.outcome:<8} {took}{tokens}{detail}")
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(summary.by_kind.items())) or "none"
    lines.append(f"candidates proposed: {summary.proposed} ({kinds})")
    lines.append(f"accepted: {summary.accepted}")
    reasons = ", ".join(f"{reason} {n}" for reason, n in summary.rejected_by_reason.most_common()) or "—"
    lines.append(f"rejected: {summary.rejected} (by reason: {reasons})")
    lines.append(f"invalid: {summary.invalid}")
    for candidate in candidates:
        why = ",".join(candidate.reasons) or "-"
        confidence = "" if candidate.confidence is None else f" conf={candidate.confidence:g}"
        lines.append(
            f"  #{candidate.id} run {candidate.run_id} {candidate.kind} {candidate.verdict} [{why}]{confidence} "
            f"{candidate.label!r}: {_short(candidate.content, 70)!r}"
        )
        if candidate.evidence_text or candidate.evidence_message_id:
            lines.append(f"      evidence [{candidate.evidence_message_id}]: {_short(candidate.evidence_text, 80)!r}")
        if candidate.validation_error:
            lines.append(f"      invalid: {_short(candidate.validation_error, 100)}")
    lines.append(f"stored: {summary.stored}")
    for item in stored:
        confidence = "" if item.confidence is None else f" (confidence {item.confidence:g})"
        lines.append(f"  {item.kind} {item.id}{confidence}: {_short(item.content)}")
        lines.append(f"    evidence [{item.thread_id} / {item.message_id}]: {item.evidence_text!r}")
    if problems:
        lines.append(f"FAILED: {len(problems)} problem(s)")
        lines += [f"  - {problem}" for problem in problems]
    else:
        lines.append(
            "PASSED: every call ended in a validated update or a recorded error; "
            "every stored memory quotes the user; every run and candidate is in the review queue"
        )
    return "\n".join(lines)
