"""The vocabularies shared by the candidate schemas, the file store, the prompt and the DB.

One definition each, so that a category the model is offered is always one the store
knows (a comparable system silently stored unknown categories as "other").
"""

from __future__ import annotations

from enum import StrEnum


class Category(StrEnum):
    PREFERENCE = "preference"
    CONTEXT = "context"
    GOAL = "goal"
    CORRECTION = "correction"


class Scope(StrEnum):
    USER = "user"
    THREAD = "thread"
    PROJECT = "project"


class Durability(StrEnum):
    DURABLE = "durable"
    TEMPORARY = "temporary"


class Authority(StrEnum):
    DESCRIPTIVE = "descriptive"
    TRANSACTIONAL = "transactional"


class CardStatus(StrEnum):
    ACTIVE = "active"
    EXPIRED = "expired"
    SUPERSEDED = "superseded"


class SourceKind(StrEnum):
    EXTRACTION = "extraction"
    REVIEW = "review"
    MANUAL = "manual"
    IMPORT = "import"


USER_SECTIONS: tuple[str, ...] = ("workContext", "personalContext", "topOfMind", "cognitiveStyle")
HISTORY_SECTIONS: tuple[str, ...] = ("recentMonths", "earlierContext", "longTermBackground")
PROFILE_SECTIONS: tuple[str, ...] = USER_SECTIONS + HISTORY_SECTIONS


def choices(enum: type[StrEnum]) -> list[tuple[str, str]]:
    return [(member.value, member.value.replace("_", " ").capitalize()) for member in enum]
