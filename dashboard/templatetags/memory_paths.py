"""Curators see memory files by their place under MEMORY_ROOT, never by absolute path:
where the server keeps its data is no business of the dashboard (nor of a screenshot)."""

from __future__ import annotations

import os
from pathlib import Path

from django import template
from django.conf import settings

register = template.Library()


@register.filter
def under_memory_root(text: object) -> str:
    """`text` with every absolute MEMORY_ROOT path made relative to it: error texts
    (a file that failed to parse, an OS error) name files by their absolute path."""
    value = str(text)
    root = Path(settings.MEMORY_ROOT)
    # the configured spelling and the real one (a symlinked root is reported resolved)
    for spelling in sorted({str(root), str(root.resolve())}, key=len, reverse=True):
        value = value.replace(spelling + os.sep, "").replace(spelling, "MEMORY_ROOT")
    return value
