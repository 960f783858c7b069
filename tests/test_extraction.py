"""Extraction through the real ChatOpenAI client against a local OpenAI-protocol stub."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from facts.intake.filtering import Row
from facts.judging.extraction import EXTRACTION_RULES, ExtractionError, extract, tool_schema
from tests.factories import fact_candidate
from tests.openai_stub import OpenAIStub

ROWS: list[Row] = [{"id": "u1", "role": "user", "content": "我主要做 Python 后端开发，平时请用中文解释技术问题。"}]


def test_it_returns_the_candidates_of_a_tool_call(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_tool_call({"facts": [fact_candidate()], "summaries": [], "confirmations": []})
    result = extract(ROWS)
    [parsed] = result.parsed
    assert parsed.valid and parsed.value.key == "response_language"
    assert result.arguments["facts"][0]["confidence"] == 0.9
    assert (result.prompt_tokens, result.completion_tokens) == (120, 40)
    assert result.model_name == "stub-model"


def test_it_sends_the_rules_the_conversation_and_the_reference_material(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_tool_call({"facts": []})
    extract(
        ROWS,
        profile={"workContext": "Python 后端", "topOfMind": ""},
        existing_facts=[
            {"id": "fact_000000000001", "key": "editor", "content": "用户用 vim", "category": "preference"}
        ],
    )
    body = openai_stub.requests[0]
    system, human = body["messages"]
    assert system["role"] == "system" and system["content"] == EXTRACTION_RULES
    payload = json.loads(human["content"])
    assert payload["conversation"] == ROWS
    assert payload["current_profile"] == {"workContext": "Python 后端"}
    assert payload["existing_facts"] == [{"id": "fact_000000000001", "key": "editor", "content": "用户用 vim"}]
    assert body["tools"][0]["function"]["name"] == "MemoryUpdate"
    assert body["model"] == "stub-model"


def test_it_sends_max_tokens_explicitly(openai_stub: OpenAIStub, settings: Any) -> None:
    settings.MEMORY_LLM_MAX_TOKENS = 777
    openai_stub.reply_tool_call({"facts": []})
    extract(ROWS)
    assert openai_stub.requests[0]["max_tokens"] == 777


def test_the_tool_schema_leaves_length_limits_to_validation(openai_stub: OpenAIStub) -> None:
    # llama-cpp-python's server turns maxLength into a grammar too large to parse, and dies.
    openai_stub.reply_tool_call({"facts": [fact_candidate(content="x" * 401)]})
    [parsed] = extract(ROWS).parsed
    sent = json.dumps(openai_stub.requests[0]["tools"][0]["function"]["parameters"])
    assert "maxLength" not in sent and "maxLength" not in json.dumps(tool_schema())
    assert '"evidence_text"' in sent
    assert tool_schema()["required"] == ["facts", "summaries", "confirmations"]
    assert not parsed.valid and "content" in parsed.error


def test_the_prompt_states_the_articles_rules() -> None:
    for phrase in (
        "Only the new conversation is evidence",
        "reference only",
        "empty lists",
        "transactional",
        "temporary",
    ):
        assert phrase in EXTRACTION_RULES
    for category in ("preference", "context", "goal", "correction"):
        assert category in EXTRACTION_RULES


def test_an_empty_update_is_a_valid_answer(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_tool_call({"facts": [], "summaries": [], "confirmations": []})
    assert extract(ROWS).parsed == []


def test_one_out_of_range_confidence_invalidates_only_that_candidate(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_tool_call({"facts": [fact_candidate(confidence=1.2, key="bad"), fact_candidate()]})
    bad, good = extract(ROWS).parsed
    assert not bad.valid and "confidence" in bad.error and bad.raw["confidence"] == 1.2
    assert good.valid


def test_malformed_json_is_an_extraction_error(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_tool_call('{"facts": [{"key": "x",, }]}')
    with pytest.raises(ExtractionError, match="malformed"):
        extract(ROWS)


def test_a_truncated_tool_call_is_an_extraction_error_not_a_silent_none(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_tool_call('{"facts": [{"key": "response_lang', finish_reason="length")
    with pytest.raises(ExtractionError, match="cut off"):
        extract(ROWS)


def test_a_call_cut_off_at_max_tokens_says_so_even_when_the_server_says_tool_calls(
    openai_stub: OpenAIStub, settings: Any
) -> None:
    # llama-cpp-python's server: finish_reason "tool_calls", arguments stop mid-string.
    settings.MEMORY_LLM_MAX_TOKENS = 40
    openai_stub.reply_tool_call('{"facts": [{"key": "response_lang', finish_reason="tool_calls", usage=(120, 40))
    with pytest.raises(ExtractionError, match="cut off"):
        extract(ROWS)


def test_a_reply_without_a_tool_call_is_an_extraction_error(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_text("The user seems to like Python.")
    with pytest.raises(ExtractionError, match="instead of a tool call"):
        extract(ROWS)


def test_arguments_that_are_not_an_object_are_an_extraction_error(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_tool_call('["facts"]')
    with pytest.raises(ExtractionError):
        extract(ROWS)


def test_http_500_is_an_extraction_error(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_error(500)
    with pytest.raises(ExtractionError, match="HTTP 500"):
        extract(ROWS)


def test_it_retries_a_server_error_and_then_succeeds(openai_stub: OpenAIStub, settings: Any) -> None:
    settings.MEMORY_LLM_MAX_RETRIES = 2
    openai_stub.reply_error(500)
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    assert len(extract(ROWS).parsed) == 1
    assert len(openai_stub.requests) == 2


def test_it_gives_up_after_the_configured_retries(openai_stub: OpenAIStub, settings: Any) -> None:
    settings.MEMORY_LLM_MAX_RETRIES = 1
    openai_stub.reply_error(503)
    with pytest.raises(ExtractionError, match="HTTP 503"):
        extract(ROWS)
    assert len(openai_stub.requests) == 2


def test_a_slow_server_is_a_timeout_error(openai_stub: OpenAIStub, settings: Any) -> None:
    settings.MEMORY_LLM_TIMEOUT = 0.3
    openai_stub.reply_tool_call({"facts": []}, delay=1.5)
    started = time.monotonic()
    with pytest.raises(ExtractionError, match="did not answer"):
        extract(ROWS)
    assert time.monotonic() - started < 1.4


def test_an_unreachable_server_is_an_extraction_error(settings: Any) -> None:
    settings.MEMORY_LLM_BASE_URL = "http://127.0.0.1:9/v1"
    settings.MEMORY_LLM_MAX_RETRIES = 0
    settings.MEMORY_LLM_API_KEY = "x"
    with pytest.raises(ExtractionError, match="could not reach"):
        extract(ROWS)


def test_the_json_schema_method_is_validated_per_candidate_too(openai_stub: OpenAIStub, settings: Any) -> None:
    settings.MEMORY_LLM_METHOD = "json_schema"
    openai_stub.reply_text(json.dumps({"facts": [fact_candidate(confidence=1.2, key="bad"), fact_candidate()]}))
    bad, good = extract(ROWS).parsed
    assert not bad.valid and good.valid
    assert openai_stub.requests[0]["response_format"]["type"] == "json_schema"
