"""What one clause says (`Statement`), how sure the rules are of it, and how its content
is phrased about the user ("I prefer …" → "User prefers …", "我喜欢…" → "用户喜欢…").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..enums import Authority, Durability, Scope
from .text import clean

_I = re.IGNORECASE

# Confidence levels. The gate's default threshold is 0.7: SURE and LIKELY pass, UNSURE
# goes to the review queue.
SURE = 0.9
LIKELY = 0.8
UNSURE = 0.45
HEDGED = 0.5


@dataclass
class Statement:
    """What one clause says, before the sentence-level labels are applied."""

    category: str
    key: str
    content: str
    confidence: float
    scope: str = Scope.USER
    durability: str = Durability.DURABLE
    authority: str = Authority.DESCRIPTIVE
    # A durable marker of its own ("always", "以后"): survives a question as an unsure candidate.
    standing: bool = False


_PRONOUNS = (
    (re.compile(r"\bI'm\b"), "they're"),
    (re.compile(r"\bI am\b"), "they are"),
    (re.compile(r"\bI've\b"), "they've"),
    (re.compile(r"\bI'd\b"), "they'd"),
    (re.compile(r"\bI\b"), "they"),
    (re.compile(r"\bmyself\b", _I), "themselves"),
    (re.compile(r"\bmy\b", _I), "their"),
    (re.compile(r"\bmine\b", _I), "theirs"),
    (re.compile(r"\bme\b", _I), "them"),
)


def _third_person(text: str) -> str:
    for pattern, repl in _PRONOUNS:
        text = pattern.sub(repl, text)
    return text


def third_person_verb(verb: str) -> str:
    """'work with' → 'works with'."""
    first, _, rest = verb.partition(" ")
    if first.endswith(("s", "sh", "ch", "x", "o")):
        first += "es"
    elif first.endswith("y") and first[-2:-1] not in "aeiou":
        first = first[:-1] + "ies"
    else:
        first += "s"
    return f"{first} {rest}".strip()


def en_content(template: str, x: str) -> str:
    return template.format(x=_third_person(clean(x)))


def zh_content(text: str) -> str:
    """'我比较喜欢X' → '用户比较喜欢X' (every 我 of the clause is the user)."""
    text = clean(text)
    text = re.sub(r"^我们", "用户所在团队", text)
    return text.replace("我", "用户") if text.startswith("我") else "用户" + text.replace("我", "用户")
