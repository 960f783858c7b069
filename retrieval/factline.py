"""The fact line: how one fact, and a profile section's text, are written into the memory
block, with the block's own markup neutralized.

Memory text is shown as written (``Result<T, E> & the ? operator``, ``R&D``, HTML): the
block is read by a model, not a browser. Only what would pass for the block's markup
changes (`as_written`): a ``<memory>`` or ``</memory>`` tag is shown with ``‹ ›``, a fact
is one line, and a profile line that would pass for a header is escaped with a
backslash. Its own module because both the render (`retrieval.render`) and the cache of
derived data (`retrieval.derived`, which keeps each card's `fact_tail_tokens`) need it.
"""

from __future__ import annotations

import re
from functools import lru_cache

from facts.intake.sanitize import strip_controls

from .tokens import count_tokens

# A tag of the block's own (`OPEN`, `CLOSE`), in any case and spacing: ``</memory>``,
# ``< /MEMORY >``, ``<memory id=x>``, ``</memory`` cut before its ``>``.
_MEMORY_TAG = re.compile(r"<(\s*/?\s*memory\b[^<>\n]*)(>?)", re.IGNORECASE)
# A line a reader would take for a header of the block: a Markdown heading, or the
# underline that makes the line above one.
_HEADER_LINE = re.compile(r"^([ \t]*)(#|=+[ \t]*$|-{2,}[ \t]*$)", re.MULTILINE)


def _tag(match: re.Match[str]) -> str:
    return f"‹{match[1]}{'›' if match[2] else ''}"


def as_written(text: str) -> str:
    """Memory text as the block shows it: the words as written, its tags neutralized.

    Nothing is entity-escaped (the block is not HTML); ``<memory>``/``</memory>`` become
    ``‹memory›``/``‹/memory›``. Control characters go too (facts/intake/sanitize.py's rule):
    turns are cleaned on the way in, but a card edited by hand or written by an older
    version may still hold a NUL.
    """
    text = strip_controls(text)
    return _MEMORY_TAG.sub(_tag, text) if "<" in text else text


def section_body(summary: str) -> str:
    """A profile section's text: its lines kept (a summary may be a list), none of them
    a header (``## Corrections`` becomes ``\\## Corrections``)."""
    lines = "\n".join(line.rstrip() for line in as_written(summary.strip()).splitlines())
    return _HEADER_LINE.sub(r"\1\\\2", lines)


def fact_tail(content: str) -> str:
    # One line per fact: inner newlines would let a fact fake a header or a fact line.
    return f" {as_written(' '.join(content.split()))}\n"


@lru_cache(maxsize=65536)  # a user's facts are rendered again at every turn
def fact_line(category: str, content: str) -> str:
    return f"- [{category}]{fact_tail(content)}"


def fact_tail_tokens(content: str) -> int:
    """Tokens of a fact's line after its ``- [category]`` prefix. cl100k never merges
    across that boundary (``]`` is punctuation, the tail starts with a space), so prefix
    + tail is the line's count; the index keeps this per card (`retrieval.derived`), so
    a render never encodes a fact's text."""
    return count_tokens(fact_tail(content))
