"""The `make e2e-llm` harness's own logic: what it counts, what it fails on. No model here."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from e2e.harness import (
    CONVERSATIONS,
    as_messages,
    collect_candidates,
    collect_stored,
    load_conversations,
    queue_problems,
    run_conversation,
    wire_messages,
)
from e2e.report import (
    Call,
    CandidateRow,
    Message,
    StoredMemory,
    check_calls,
    check_evidence,
    check_queue,
    render,
    summarize,
)
from tests.factories import fact_candidate
from tests.openai_stub import OpenAIStub

THREADS = {
    "t1": [
        Message("u1", "user", "我主要做 Python 后端开发，平时请用中文解释技术问题。"),
        Message("a1", "assistant", "好的，你喜欢 Java。"),
    ]
}


def card(evidence: str, message_id: str = "u1", thread_id: str = "t1") -> StoredMemory:
    return StoredMemory("card", "fact_000000000001", "用户偏好中文解释", thread_id, message_id, evidence, 0.9)


def candidate(cid: int, verdict: str, *reasons: str, kind: str = "fact") -> CandidateRow:
    return CandidateRow(cid, 1, kind, "response_language", "用户偏好中文解释", verdict, reasons, 0.9, "u1", "中文")


def test_it_accepts_evidence_quoted_from_the_user_message() -> None:
    assert check_evidence([card("平时请用中文解释技术问题")], THREADS) == []


def test_it_treats_width_case_spacing_and_surrounding_quotes_as_the_same_words() -> None:
    threads = {"t1": [Message("u1", "user", "I mostly write Go  services. 我用 Ｐｙｔｈｏｎ。")]}
    assert check_evidence([card("“i mostly write go services.”")], threads) == []
    assert check_evidence([card("我用 Python")], threads) == []
    assert check_evidence([card("I mostly write Rust")], threads)


def test_it_fails_a_card_whose_evidence_the_user_never_wrote() -> None:
    [problem] = check_evidence([card("我喜欢 Rust")], THREADS)
    assert "is not in user message u1" in problem


def test_it_fails_a_card_whose_evidence_is_the_assistants() -> None:
    [problem] = check_evidence([card("你喜欢 Java", message_id="a1")], THREADS)
    assert "from a assistant message" in problem


def test_it_fails_a_card_that_names_a_message_of_another_thread() -> None:
    assert check_evidence([card("中文", thread_id="t2")], THREADS)
    assert check_evidence([card("中文", message_id="u9")], THREADS)


def test_it_fails_a_card_stored_without_evidence() -> None:
    [problem] = check_evidence([card("  ")], THREADS)
    assert "without evidence" in problem


def test_it_accepts_updates_errors_and_skips_but_not_crashes_or_silent_nones() -> None:
    fine = [Call("a", "update", 1.0), Call("b", "error", 2.0, error="ExtractionError: truncated"), Call("c", "skipped")]
    assert check_calls(fine) == []
    problems = check_calls(
        [Call("d", "crash", error="KeyError: 'x'"), Call("e", "none"), Call("f", "error"), Call("g", "update")]
    )
    assert [p.split(":")[0] for p in problems] == ["d", "e", "f"]


def test_it_fails_a_run_where_no_call_returned_an_update() -> None:
    [problem] = check_calls([Call("a", "error", 2.3, error="HTTP 500"), Call("b", "skipped")])
    assert "no model call returned a validated update" in problem


def test_it_counts_calls_latency_and_rejections_by_every_reason() -> None:
    calls = [Call("a", "update", 3.0), Call("b", "error", 5.0, error="x"), Call("c", "skipped")]
    candidates = [
        candidate(1, "accepted"),
        candidate(2, "rejected", "scope_project", "low_confidence"),
        candidate(3, "rejected", "invalid"),
        candidate(4, "rejected", "low_confidence", kind="summary"),
    ]
    summary = summarize(calls, candidates, [card("中文")])
    assert (summary.calls, summary.skipped, summary.errors) == (2, 1, 1)
    assert summary.latencies == [3.0, 5.0]
    assert (summary.proposed, summary.accepted, summary.rejected, summary.invalid) == (4, 1, 3, 1)
    assert summary.rejected_by_reason == Counter({"low_confidence": 2, "scope_project": 1, "invalid": 1})
    assert summary.by_kind == Counter({"fact": 3, "summary": 1})


def test_it_prints_every_stored_card_with_its_evidence_and_the_verdict() -> None:
    calls = [Call("article", "update", 4.2, (1,))]
    stored = [card("平时请用中文解释技术问题")]
    text = render(summarize(calls, [candidate(1, "accepted")], stored), calls, [candidate(1, "accepted")], stored, [])
    assert "latency per call: mean 4.2 s" in text
    assert "fact_000000000001" in text
    assert "'平时请用中文解释技术问题'" in text
    assert text.rstrip().splitlines()[-1].startswith("PASSED")


def test_it_prints_failures_last() -> None:
    text = render(summarize([], [], []), [], [], [], ["card x: evidence 'y' is not in user message u1"])
    assert "no model calls" in text
    assert text.splitlines()[-2:] == ["FAILED: 1 problem(s)", "  - card x: evidence 'y' is not in user message u1"]


def test_it_requires_every_run_and_candidate_in_the_review_queue() -> None:
    assert check_queue([1], [10, 11], {1}, {10, 11}) == []
    problems = check_queue([1, 2], [10, 11], {1}, {10})
    assert problems == [
        "run 2 is not in the review queue's runs",
        "candidate 11 is not in the review queue's candidates",
    ]


def test_it_requires_each_candidate_on_the_review_page_when_the_page_exists() -> None:
    page = '<a href="/review/10/">x</a>'
    assert check_queue([1], [10], {1}, {10}, page) == []
    assert check_queue([1], [10, 11], {1}, {10, 11}, page) == ["candidate 11 does not appear on the review queue page"]


def test_it_ships_chinese_and_english_conversations_including_the_articles_example() -> None:
    conversations = load_conversations(CONVERSATIONS)
    texts = [m["content"] for c in conversations for m in c["messages"]]
    assert "我主要做 Python 后端开发，平时请用中文解释技术问题。" in texts
    assert any(c["thread_id"].startswith("en") for c in conversations)
    assert len({c["thread_id"] for c in conversations}) == len(conversations)
    ids = [m["id"] for c in conversations for m in c["messages"]]
    assert len(ids) == len(set(ids))


def test_it_sends_conversations_as_langchain_message_dicts() -> None:
    [conversation] = [c for c in load_conversations() if c["name"] == "en-tools-and-injected-memory"]
    wire = wire_messages(conversation)
    assert [m["type"] for m in wire] == ["system", "human", "human", "ai", "tool", "ai"]
    assert wire[1]["additional_kwargs"] == {"origin": "memory", "hide_from_ui": True}
    assert wire[3]["tool_calls"][0]["name"] == "read_file"
    assert [m.role for m in as_messages(conversation)][:2] == ["system", "user"]
    json.dumps(wire)


# --- the harness against the OpenAI-protocol stub (no model, real ChatOpenAI and gate) ---

ARTICLE = {
    "name": "article",
    "user_id": "alice",
    "agent_name": "coder",
    "thread_id": "t1",
    "messages": [
        {"id": "u1", "role": "user", "content": "我主要做 Python 后端开发，平时请用中文解释技术问题。"},
        {"id": "a1", "role": "assistant", "content": "好的。"},
    ],
}


def run(conversation: dict[str, Any]) -> tuple[Call, list[CandidateRow], list[StoredMemory], list[str]]:
    call = run_conversation(conversation)
    candidates, stored = collect_candidates(), collect_stored()
    threads = {conversation["thread_id"]: as_messages(conversation)}
    problems = check_calls([call, Call("earlier", "update")]) + check_evidence(stored, threads)
    problems += queue_problems(candidates, list(call.run_ids))
    return call, candidates, stored, problems


@pytest.mark.django_db
def test_it_reports_a_card_stored_from_the_users_words(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_tool_call({"facts": [fact_candidate()], "summaries": [], "confirmations": []})
    call, candidates, stored, problems = run(ARTICLE)
    assert (call.outcome, call.seconds is not None, problems) == ("update", True, [])
    assert [(c.verdict, c.reasons) for c in candidates] == [("accepted", ())]
    [card] = stored
    assert (card.kind, card.message_id, card.evidence_text) == ("card", "u1", "平时请用中文解释技术问题")


@pytest.mark.django_db
def test_invented_evidence_and_an_absurd_confidence_are_rejected_and_nothing_is_stored(
    openai_stub: OpenAIStub,
) -> None:
    openai_stub.reply_tool_call(
        {
            "facts": [
                fact_candidate(evidence_text="我喜欢 Rust"),
                fact_candidate(evidence_text="好的。", evidence_message_id="a1"),
                fact_candidate(evidence_text="中文", confidence=596.0),
            ]
        }
    )
    call, candidates, stored, problems = run(ARTICLE)
    assert (call.outcome, stored, problems) == ("update", [], [])
    assert [c.verdict for c in candidates] == ["rejected"] * 3
    assert "evidence_missing" in candidates[0].reasons
    assert "evidence_not_user" in candidates[1].reasons
    assert "invalid" in candidates[2].reasons


@pytest.mark.django_db
def test_a_truncated_tool_call_is_reported_as_a_recorded_error(openai_stub: OpenAIStub) -> None:
    # What llama-cpp-python's server sends when max_tokens cuts the call: finish_reason
    # "tool_calls" and arguments that stop mid-string.
    openai_stub.reply_tool_call('{"facts": [{"key": "user", "evidence_text": "这是', finish_reason="tool_calls")
    call, candidates, stored, problems = run(ARTICLE)
    assert (call.outcome, candidates, stored, problems) == ("error", [], [], [])
    assert "malformed" in call.error


@pytest.mark.django_db
def test_a_server_error_is_reported_as_a_recorded_error(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_error(500, "Input should be 'text' or 'json_object'")
    call, _, _, problems = run(ARTICLE)
    assert (call.outcome, problems) == ("error", [])
    assert "HTTP 500" in call.error


@pytest.mark.django_db
def test_a_conversation_with_nothing_to_remember_makes_no_model_call(openai_stub: OpenAIStub) -> None:
    thanks = {**ARTICLE, "thread_id": "t2", "messages": [{"id": "u9", "role": "user", "content": "Thanks!"}]}
    call, _, _, problems = run(thanks)
    assert (call.outcome, problems, openai_stub.requests) == ("skipped", [], [])
