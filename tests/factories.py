"""Builders shared by the write-path tests: fact candidates as a model would send them."""

from __future__ import annotations

from typing import Any

from facts.judging.schemas import FactCandidate


def fact_candidate(
    key: str = "response_language",
    content: str = "用户偏好用中文解释技术问题。",
    evidence_text: str = "平时请用中文解释技术问题",
    evidence_message_id: str = "u1",
    **labels: Any,
) -> dict[str, Any]:
    """A fact candidate as the model would send it, by default the article's durable
    Chinese preference: a user-scoped, durable, descriptive preference at 0.9 whose
    evidence is in the user message `u1`. `labels` override or add any other field."""
    data: dict[str, Any] = {
        "key": key,
        "content": content,
        "category": "preference",
        "scope": "user",
        "durability": "durable",
        "authority": "descriptive",
        "confidence": 0.9,
        "evidence_message_id": evidence_message_id,
        "evidence_text": evidence_text,
    }
    return data | labels


def stack_candidate(**overrides: Any) -> dict[str, Any]:
    """The article's other durable fact: the user's main stack (a `context` fact whose
    evidence is "我主要做 Python 后端开发" in `u1`)."""
    defaults: dict[str, Any] = {
        "key": "work_stack",
        "content": "User mainly does Python backend development.",
        "category": "context",
        "evidence_text": "我主要做 Python 后端开发",
    }
    return fact_candidate(**(defaults | overrides))


def fact_model(**overrides: Any) -> FactCandidate:
    """`fact_candidate(**overrides)` validated, as the gate receives it."""
    return FactCandidate.model_validate(fact_candidate(**overrides))
