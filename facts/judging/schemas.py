"""What the extraction model may propose (pydantic v2, docs/design.md §5.2).

The model's reply is validated **per candidate**: `parse_update` never raises on a bad
value, it returns every candidate with either its validated form or the error, so one
out-of-range confidence cannot sink the good candidates beside it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from facts.enums import PROFILE_SECTIONS, Authority, Category, Durability, Scope
from facts.intake.sanitize import strip_controls

_SPACES = re.compile(r"[\s\-]+")


def normalize_key(value: str) -> str:
    """`Response Language` and `response-language` name the same attribute."""
    return _SPACES.sub("_", value.strip()).strip("_").lower()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_controls(cls, value: Any) -> Any:
        # A model reply is as untrusted as a turn: no NUL reaches a card (facts/intake/sanitize.py).
        return strip_controls(value) if isinstance(value, str) else value


class FactCandidate(_Strict):
    key: str = Field(min_length=1, max_length=80, description="Stable attribute name, e.g. response_language")
    content: str = Field(min_length=1, max_length=400, description="The fact as one sentence about the user")
    category: Category
    scope: Scope
    durability: Durability
    authority: Authority
    confidence: float = Field(ge=0, le=1, allow_inf_nan=False)
    evidence_message_id: str = Field(min_length=1, description="id of the user message that says it")
    evidence_text: str = Field(min_length=1, description="The user's own words, copied verbatim")

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        key = normalize_key(value)
        if not key:
            raise ValueError("key is empty")
        return key

    @field_validator("confidence", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        # "0.9" from a sloppy server is fine, True is not a confidence.
        if isinstance(value, bool):
            raise ValueError("confidence must be a number")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("confidence must be finite")
        return value


class SummaryCandidate(_Strict):
    section: Literal[PROFILE_SECTIONS]  # type: ignore[valid-type]
    summary: str = Field(min_length=1, max_length=1200)
    scope: Scope
    authority: Authority
    evidence_message_id: str = Field(min_length=1)
    evidence_text: str = Field(min_length=1)


class Confirmation(_Strict):
    """The user explicitly re-confirmed an existing fact (named by key or id)."""

    key: str | None = Field(default=None, max_length=80)
    fact_id: str | None = None
    evidence_message_id: str = Field(min_length=1)
    evidence_text: str = Field(min_length=1)

    @field_validator("key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        return normalize_key(value) or None if value is not None else None

    @model_validator(mode="after")
    def _names_a_fact(self) -> Confirmation:
        if not self.key and not self.fact_id:
            raise ValueError("a confirmation names a fact by key or fact_id")
        return self


class MemoryUpdate(_Strict):
    """The structured output the extraction model is bound to."""

    facts: list[FactCandidate] = Field(default_factory=list)
    summaries: list[SummaryCandidate] = Field(default_factory=list)
    confirmations: list[Confirmation] = Field(default_factory=list)


Kind = Literal["fact", "summary", "confirmation"]
_MODELS: dict[str, type[BaseModel]] = {
    "fact": FactCandidate,
    "summary": SummaryCandidate,
    "confirmation": Confirmation,
}
_LISTS: dict[str, str] = {"facts": "fact", "summaries": "summary", "confirmations": "confirmation"}


@dataclass
class Parsed:
    """One candidate of the model's reply: validated, or kept raw with the error."""

    kind: Kind
    position: int
    raw: Any
    value: FactCandidate | SummaryCandidate | Confirmation | None
    error: str = ""

    @property
    def valid(self) -> bool:
        return self.value is not None


def describe(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}" for err in exc.errors())


def parse_update(raw: Any) -> list[Parsed]:
    """Validate each candidate of a raw MemoryUpdate on its own.

    `raw` is the decoded tool-call arguments. A list that is not a list, or an item that
    is not an object, becomes an invalid candidate; it never raises.
    """
    if not isinstance(raw, dict):
        raise TypeError("the model's arguments are not a JSON object")
    parsed: list[Parsed] = []
    for list_name, kind in _LISTS.items():
        items = raw.get(list_name)
        if items is None:
            continue
        if not isinstance(items, list):
            parsed.append(Parsed(kind, 0, items, None, f"{list_name}: expected a list"))  # type: ignore[arg-type]
            continue
        model = _MODELS[kind]
        for position, item in enumerate(items):
            try:
                value = model.model_validate(item)
            except ValidationError as exc:
                parsed.append(Parsed(kind, position, item, None, describe(exc)))  # type: ignore[arg-type]
            else:
                parsed.append(Parsed(kind, position, item, value))  # type: ignore[arg-type]
    return parsed
