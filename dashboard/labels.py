"""Words a curator reads in place of the codes the domain stores: profile section names
and the gate's reason codes. Presentation only; the codes stay what the data holds."""

from __future__ import annotations

from facts.enums import PROFILE_SECTIONS
from facts.judging import gate
from retrieval.render import TITLES

# The same titles the agents read in their memory block (one list, in retrieval.render).
SECTION_LABELS: dict[str, str] = TITLES

# What each gate rule means for the reviewer deciding whether to override it.
REASON_HELP: dict[str, str] = {
    gate.SCOPE_THREAD: "Only true inside this conversation: it would not help in the next one.",
    gate.SCOPE_PROJECT: "About a project, but the turn named no project to keep it in.",
    gate.TEMPORARY: "Will stop being true soon (a plan for today, a passing state).",
    gate.TRANSACTIONAL: "An instruction for this run, not a description of the user.",
    gate.LOW_CONFIDENCE: "The model's confidence is under the threshold (MEMORY_CONFIDENCE_THRESHOLD).",
    gate.EVIDENCE_MISSING: "The quoted evidence is not in the message it names (or that message is gone).",
    gate.EVIDENCE_NOT_USER: "The evidence is from the assistant or a tool: only the user's words count.",
    gate.DANGLING_REFERENCE: (
        'Points at something only the conversation held ("it", "them", "that place", 这个): '
        "it would not make sense on its own. Approve only if you can read it alone."
    ),
    gate.UNGROUNDED: "Says something (a name, a number, a thing) that is not in the user's quoted words.",
    gate.KEY_MISMATCH: (
        "Uses a key that names one attribute (like the answer language) for a statement about something else: "
        "approving it would replace the card that holds that attribute."
    ),
    gate.DUPLICATE: "Says what a live card already says.",
    gate.INVALID: "The model's proposal was malformed (a missing field, a value out of range).",
}

# A backtest's outcomes (facts.judging.backtest), as a curator says them.
OUTCOME_WORDS: dict[str, str] = {
    "accepted": "written",
    "pending": "held for review",
    "rejected": "rejected",
}


def outcome_change(move: str) -> str:
    """A backtest's "rejected->accepted" (the key `backtest --json` prints) as "rejected → written"."""
    before, _, after = move.partition("->")
    return f"{OUTCOME_WORDS.get(before, before)} → {OUTCOME_WORDS.get(after, after)}"


assert set(SECTION_LABELS) == set(PROFILE_SECTIONS), "every profile section needs a label"
assert set(REASON_HELP) == set(gate.REASON_CODES), "every gate reason code needs an explanation"


def section_label(name: str) -> str:
    return SECTION_LABELS.get(name, name)
