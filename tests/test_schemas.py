"""Candidate schemas: each candidate is validated alone."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from facts.judging.schemas import Confirmation, MemoryUpdate, SummaryCandidate, parse_update
from tests.factories import fact_candidate, fact_model


def test_it_accepts_a_well_formed_fact() -> None:
    candidate = fact_model()
    assert candidate.key == "response_language"
    assert candidate.confidence == 0.9


@pytest.mark.parametrize("confidence", [1.2, -0.1, math.nan, math.inf, -math.inf, "high", True, None])
def test_it_rejects_confidence_outside_zero_to_one_or_not_finite(confidence: Any) -> None:
    with pytest.raises(ValidationError):
        fact_model(confidence=confidence)


@pytest.mark.parametrize("confidence", [0, 0.0, 1, 1.0, 0.7])
def test_it_keeps_edge_confidences_including_a_real_zero(confidence: float) -> None:
    assert fact_model(confidence=confidence).confidence == float(confidence)


@pytest.mark.parametrize(
    ("field", "value"),
    [("category", "other"), ("scope", "global"), ("durability", "forever"), ("authority", "permission")],
)
def test_it_rejects_unknown_enum_values(field: str, value: str) -> None:
    with pytest.raises(ValidationError):
        fact_model(**{field: value})


@pytest.mark.parametrize("field", ["evidence_text", "evidence_message_id", "content", "key"])
def test_it_rejects_empty_evidence_content_and_key(field: str) -> None:
    with pytest.raises(ValidationError):
        fact_model(**{field: "   "})


def test_it_rejects_overlong_content() -> None:
    with pytest.raises(ValidationError):
        fact_model(content="x" * 401)


def test_it_normalizes_keys_so_spellings_of_one_attribute_agree() -> None:
    assert fact_model(key=" Response-Language ").key == "response_language"


def test_it_validates_summary_sections() -> None:
    ok = {"section": "topOfMind", "summary": "学习 Agent 上下文工程", "scope": "user", "authority": "descriptive"}
    ok |= {"evidence_message_id": "m1", "evidence_text": "学习"}
    assert SummaryCandidate.model_validate(ok).section == "topOfMind"
    with pytest.raises(ValidationError):
        SummaryCandidate.model_validate(ok | {"section": "secrets"})


def test_it_requires_a_confirmation_to_name_a_fact() -> None:
    with pytest.raises(ValidationError):
        Confirmation.model_validate({"evidence_message_id": "m1", "evidence_text": "yes, still true"})
    assert Confirmation.model_validate(
        {"key": "Response Language", "evidence_message_id": "m", "evidence_text": "t"}
    ).key == ("response_language")


def test_it_allows_an_empty_update() -> None:
    assert MemoryUpdate.model_validate({}) == MemoryUpdate(facts=[], summaries=[], confirmations=[])


def test_it_validates_each_candidate_alone_so_one_bad_value_never_sinks_the_batch() -> None:
    parsed = parse_update(
        {"facts": [fact_candidate(), fact_candidate(confidence=1.2, key="other"), "not an object"], "summaries": None}
    )
    assert [p.valid for p in parsed] == [True, False, False]
    assert "confidence" in parsed[1].error
    assert parsed[1].raw["confidence"] == 1.2
    assert parsed[2].position == 2


def test_it_reports_a_list_that_is_not_a_list_as_one_invalid_candidate() -> None:
    parsed = parse_update({"facts": {"key": "x"}})
    assert len(parsed) == 1 and not parsed[0].valid


def test_it_refuses_arguments_that_are_not_an_object() -> None:
    with pytest.raises(TypeError):
        parse_update(["facts"])
