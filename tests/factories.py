"""Builders shared by the write-path tests."""

from __future__ import annotations

from typing import Any


def fact_candidate(**overrides: Any) -> dict[str, Any]:
    """A fact candidate as the model would send it: the article's durable Chinese preference."""
    data: dict[str, Any] = {
        "key": "response_language",
        "content": "用户偏好用中文解释技术问题。",
        "category": "preference",
        "scope": "user",
        "durability": "durable",
        "authority": "descriptive",
        "confidence": 0.9,
        "evidence_message_id": "u1",
        "evidence_text": "平时请用中文解释技术问题",
    }
    data.update(overrides)
    return data
