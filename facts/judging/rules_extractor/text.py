"""Splitting a message into sentences and clauses, and trimming a piece of it.

Every rule works on (start, end) spans of the user's own text, so the evidence a
candidate quotes is always a verbatim slice of the message.
"""

from __future__ import annotations

import re

_I = re.IGNORECASE

# Sentence ends: CJK and ASCII terminators, a period before a space, a line break.
SENTENCE_END = re.compile(r"[。！？!?；;]+|\.(?=\s|$)|\n+")
# Clause breaks inside a sentence.
CLAUSE_BREAK = re.compile(r"[，,、：:]|\s[—–-]{1,2}\s|\s(?=(?:and|but|so) (?:I|I'm|my|please)\b)")


# Spans whose punctuation is not the sentence's: code, generics, links, abbreviations,
# and what the user quotes (a sign, a title, someone else's words).
_QUOTED = re.compile(r'"[^"\n]{1,200}"|“[^”\n]{1,200}”|「[^」\n]{1,200}」|『[^』\n]{1,200}』|《[^》\n]{1,80}》')
_PROTECTED = re.compile(
    r"`[^`\n]{1,200}`|\b\w+<[^<>\n]{1,40}>|(?:https?://|www\.)\S+|\b(?:e\.g|i\.e|etc|vs|approx|mr|mrs|ms|dr)\.|"
    r"(?<=\s)[?!.](?=\s)",
    _I,
)
_PUNCT = re.compile(r"[^\w\s]")


def mask(text: str) -> tuple[str, list[tuple[int, int]]]:
    """`text` with the punctuation of protected spans replaced (same length, so a span
    of the mask is a span of the text), and where the quotes are."""
    chars = list(text)
    quotes = []
    for pattern in (_PROTECTED, _QUOTED):
        for m in pattern.finditer(text):
            inner_start = m.start() + (1 if pattern is _QUOTED else 0)
            inner_end = m.end() - (1 if pattern is _QUOTED else 0)
            for i in range(inner_start, inner_end):
                if _PUNCT.match(chars[i]):
                    chars[i] = "x"
            if pattern is _QUOTED:
                quotes.append((m.start(), m.end()))
    return "".join(chars), quotes


def spans(text: str, pattern: re.Pattern[str], start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """Non-empty stripped (start, end) pieces of text[start:end] between matches of `pattern`."""
    end = len(text) if end is None else end
    pieces, cursor = [], start
    for match in pattern.finditer(text, start, end):
        pieces.append((cursor, match.end()))
        cursor = match.end()
    pieces.append((cursor, end))
    out = []
    for a, b in pieces:
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if a < b:
            out.append((a, b))
    return out


_TRAILING = " \t\r\n。．.！!？?；;，,、：:…~～—–-\"'“”‘’)）"
_LEADING = " \t\r\n，,、：:…~～—–-\"'“”‘’(（"


def clean(text: str) -> str:
    return text.strip(_TRAILING).strip(_LEADING).strip(_TRAILING)


def has_han(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)
