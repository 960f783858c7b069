"""Template filters for the curators' words: section labels and reason explanations."""

from __future__ import annotations

from django import template

from dashboard import labels
from facts.curation.review import is_reviewable
from facts.models import Candidate

register = template.Library()


@register.filter
def section_label(name: str) -> str:
    """workContext → "Work context" (unknown names, e.g. "frame" or "facts", as they are)."""
    return labels.SECTION_LABELS.get(name, name)


@register.filter
def outcome_change(move: str) -> str:
    return labels.outcome_change(move)


@register.filter
def outcome_word(outcome: str) -> str:
    return labels.OUTCOME_WORDS.get(outcome, outcome)


@register.filter
def reason_help(code: str) -> str:
    return labels.REASON_HELP.get(code, "")


UNDO_PREFIX = "undo-dismiss:"


@register.filter
def undo_ids(extra_tags: str) -> list[int]:
    """The candidates a "Dismissed" flash message can restore (its extra tags carry them)."""
    for tag in (extra_tags or "").split():
        if tag.startswith(UNDO_PREFIX):
            return [int(pk) for pk in tag.removeprefix(UNDO_PREFIX).split(",") if pk.isdigit()]
    return []


@register.filter
def reviewable(candidate: Candidate) -> bool:
    """Open to approve or dismiss (the same rule the actions check)."""
    return is_reviewable(candidate)


@register.filter
def among(name: str | None, names: str) -> bool:
    """`name` is one of the space-separated `names` -- whole names only: "overview" is not
    among "gate_overview gate_backtest" (a substring test said it was, and the nav marked
    Gate current on the overview)."""
    return bool(name) and name in names.split()
