"""Template filters for the curators' words: section labels and reason explanations."""

from __future__ import annotations

from django import template

from dashboard import labels

register = template.Library()


@register.filter
def section_label(name: str) -> str:
    """workContext → "Work context" (unknown names, e.g. "frame" or "facts", as they are)."""
    return labels.SECTION_LABELS.get(name, name)


@register.filter
def reason_help(code: str) -> str:
    return labels.REASON_HELP.get(code, "")
