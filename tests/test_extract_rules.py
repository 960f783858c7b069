"""The built-in rule extractor: what it keeps, what it must never keep, and how it is
chosen when no model server is configured (facts/judging/rules_extractor/)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from facts.demo import DEMO_FILE
from facts.intake.filtering import Row
from facts.intake.queue import record_turn
from facts.judging.extraction import ExtractionError, active_extractor, extract
from facts.judging.pipeline import run_turns_now
from facts.judging.rules_extractor import extractor
from facts.models import Candidate, ExtractionRun, FactCard
from retrieval.render import render_context
from tests.factories import fact_candidate
from tests.openai_stub import OpenAIStub
from tests.rules_eval import load, score

THREAD = {"user_id": "alice", "agent_name": "coder", "thread_id": "t1"}
NEGATIVE_KINDS = {"temporary", "transactional", "question", "assistant", "greeting", "task", "third_party", "hypothetical", "unsure"}  # fmt: skip


@pytest.fixture
def no_model(settings: Any) -> None:
    settings.MEMORY_LLM_BASE_URL = ""
    settings.MEMORY_EXTRACTOR = ""


def facts_of(text: str, *, role: str = "user") -> list[dict[str, Any]]:
    return extractor.extract_facts([{"id": "u1", "role": role, "content": text}])


def only(text: str) -> dict[str, Any]:
    [fact] = facts_of(text)
    return fact


# --- the labelled set (no database) ---------------------------------------------------------


def test_it_keeps_precision_of_at_least_095_on_the_labelled_set() -> None:
    snippets = load()
    assert len(snippets) >= 120
    result = score(snippets)
    assert result.precision >= 0.95, result.wrong
    # recall is reported by `make bench`; this only guards against a rule silently dying
    assert result.recall >= 0.8, result.missed
    assert result.evidence_not_user == 0


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_on_real_conversations_what_it_keeps_is_right(lang: str) -> None:
    """MemoryBank's user lines (tests/data/memorybank, labels ours): the floor on the part
    the rules were tuned on, and below what the holdout measured (docs/extraction.md)."""
    from tests import memorybank_extraction

    scores = memorybank_extraction.by_split(lang)
    assert scores["dev"].precision >= 0.95, scores["dev"].wrong
    assert scores["dev"].recall >= 0.25
    assert scores["holdout"].precision >= 0.85
    assert scores["holdout"].accepted >= 15


def test_negative_snippets_never_become_memory() -> None:
    negatives = [s for s in load() if s["kind"] in NEGATIVE_KINDS]
    assert len(negatives) >= 50
    result = score(negatives)
    assert result.accepted == 0, result.wrong


def test_both_languages_are_covered_by_the_labelled_set() -> None:
    for lang in ("en", "zh"):
        part = [s for s in load() if s["lang"] == lang]
        assert len(part) >= 50
        assert score(part).precision >= 0.95


def test_on_the_demo_conversations_it_keeps_only_what_their_labels_keep() -> None:
    """facts/demo_data/demo.jsonl was labelled by another author (its model_output):
    an independent check. Every fact the rules get through the gate comes from a message
    whose labelled facts the gate accepts too, and most labelled messages are found."""
    from facts.intake.filtering import filter_messages
    from facts.judging import gate
    from facts.judging.schemas import parse_update

    def accepted(output: dict[str, Any], rows: list[Any], project_id: str | None) -> set[str]:
        return {
            p.value.evidence_message_id
            for p in parse_update(output)
            if p.kind == "fact" and p.valid and not gate.judge_fact(p.value, rows, project_id=project_id, threshold=0.7)  # type: ignore[arg-type]
        }

    demo = DEMO_FILE  # the demo the product loads (facts/demo_data/)
    found = labelled = 0
    for line in demo.read_text(encoding="utf-8").splitlines():
        turn = json.loads(line)
        rows, project = filter_messages(turn["messages"]), turn.get("project_id") or None
        mine = accepted({"facts": extractor.extract_facts(rows)}, rows, project)
        theirs = accepted(turn["model_output"], rows, project)
        assert mine <= theirs, (mine - theirs, rows)
        found, labelled = found + len(mine), labelled + len(theirs)
    assert labelled == 9 and found >= 8  # messages with a labelled fact; the rules find 9 today (10 of 12 facts)


# --- what one statement becomes ---------------------------------------------------------------


def test_it_quotes_the_users_words_verbatim() -> None:
    text = "好的。我主要做 Python 后端开发，平时请用中文解释技术问题。"
    facts = facts_of(text)
    assert [f["key"] for f in facts] == ["primary_stack", "response_language"]
    assert all(f["evidence_text"] in text and f["evidence_message_id"] == "u1" for f in facts)
    assert facts[1]["content"] == "用户希望平时用中文解释技术问题"


def test_it_labels_an_explicit_preference_durable_and_confident() -> None:
    fact = only("I prefer concise answers.")
    assert (fact["key"], fact["category"], fact["scope"], fact["durability"], fact["authority"]) == (
        "response_length", "preference", "user", "durable", "descriptive",
    )  # fmt: skip
    assert fact["confidence"] >= 0.7
    assert fact["content"] == "User prefers concise answers."


@pytest.mark.parametrize("text", ["Just for this answer, reply in English.", "这次先用英文回答吧。"])
def test_a_one_off_request_is_temporary_and_thread_scoped(text: str) -> None:
    fact = only(text)
    assert (fact["key"], fact["scope"], fact["durability"]) == ("response_language", "thread", "temporary")


@pytest.mark.parametrize("text", ["You can push to main without asking.", "你可以直接 push 到 main。"])
def test_a_grant_to_act_is_transactional(text: str) -> None:
    fact = only(text)
    assert fact["authority"] == "transactional" and fact["key"] == "permission_push"


@pytest.mark.parametrize(
    "text",
    ["Can you explain decorators?", "以后能不能都用中文回答？", "What's the best editor?", "我是不是应该学 Go？"],
)
def test_questions_give_no_durable_fact(text: str) -> None:
    assert all(f["confidence"] < 0.7 for f in facts_of(text))


@pytest.mark.parametrize("text", ["My colleague prefers vim.", "我同事喜欢用 Emacs。", "If I were you I'd use tabs."])
def test_other_people_and_hypotheticals_give_nothing(text: str) -> None:
    assert facts_of(text) == []


def test_the_assistants_words_give_nothing() -> None:
    assert facts_of("I prefer concise answers. My name is Claude.", role="assistant") == []


@pytest.mark.parametrize(
    "text", ["Maybe I prefer shorter answers.", "我可能更喜欢简短的回答。", "我是一个比较随意的人。"]
)
def test_an_unsure_statement_is_proposed_with_low_confidence(text: str) -> None:
    fact = only(text)
    assert fact["confidence"] < 0.7


# --- what real conversations showed (issue 35: a public benchmark read by hand) ----------------


def accepted_contents(text: str) -> list[str]:
    from facts.judging import gate
    from facts.judging.schemas import parse_update

    rows: list[Any] = [{"id": "u1", "role": "user", "content": text}]
    facts = extractor.extract_facts(rows)
    return [
        f["content"]
        for f, p in zip(facts, parse_update({"facts": facts}), strict=True)
        if p.valid and not gate.judge_fact(p.value, rows, project_id=None, threshold=0.7)  # type: ignore[arg-type]
    ]


@pytest.mark.parametrize(
    "text",
    [
        "Nope, never been on a sports team.",
        "Never heard of it.",
        'My favourite sign says "Always look on the bright side of life".',
        "LeBron is unreal. Never give up!",
        "Always be kind, that's what my mom says.",
        "Never again, honestly.",
    ],
)
def test_a_fragment_or_a_motto_never_becomes_an_instruction(text: str) -> None:
    assert accepted_contents(text) == []


@pytest.mark.parametrize(
    "text",
    [
        "I love them.",
        "I love how uncomplicated it is.",
        "I love escaping to that world.",
        "I really like the actors and the plot, especially the ending.",
        "I'm preparing for the interview.",
        "我很喜欢这种气质。",
        "我最喜欢那首歌。",
        "I like your idea.",
    ],
)
def test_a_statement_whose_object_is_in_the_conversation_gives_nothing(text: str) -> None:
    assert accepted_contents(text) == []


def test_mentioning_a_language_is_not_an_answer_language_preference() -> None:
    [fact] = facts_of("Please always answer in English.")
    assert fact["key"] == "response_language"
    assert all(
        f["key"] != "response_language" for f in facts_of("It's much easier since I took French in high school.")
    )
    assert only("I prefer Sichuan and Cantonese cuisine.")["key"] != "response_language"
    assert only("I like hiking, long-distance running and basketball.")["key"] != "response_length"


def test_code_generics_operators_and_links_are_kept_whole() -> None:
    assert accepted_contents("I prefer Result<T, E> & the ? operator over panics in Rust.") == [
        "User prefers Result<T, E> & the ? operator over panics in Rust."
    ]
    [content] = accepted_contents(
        "From now on, always link to https://docs.python.org/3/library/re.html, e.g. for regexes."
    )
    assert "https://docs.python.org/3/library/re.html" in content


@pytest.mark.parametrize(
    "text",
    [
        "Just for today, reply in French.",
        "For this answer only, use bullet points.",
        "This time, answer in English.",
        "这次用英文回答。",
        "今天先别写测试。",
    ],
)
def test_a_one_off_request_is_rejected_as_temporary(text: str) -> None:
    from facts.judging import gate
    from facts.judging.schemas import parse_update

    rows: list[Any] = [{"id": "u1", "role": "user", "content": text}]
    [parsed] = parse_update({"facts": extractor.extract_facts(rows)})
    assert gate.TEMPORARY in gate.judge_fact(parsed.value, rows, project_id=None, threshold=0.7)  # type: ignore[arg-type]


def test_a_standing_request_that_names_where_it_applies_is_kept() -> None:
    assert accepted_contents("以后请在回答里附上参考链接。") == ["用户希望以后在回答里附上参考链接"]


def test_a_likes_statement_is_cut_at_its_reason() -> None:
    assert accepted_contents("I like shooting landscapes the most because every place has its own atmosphere.") == [
        "User likes shooting landscapes the most."
    ]
    assert accepted_contents("我最喜欢鼓浪屿，那里的美景和氛围都很棒。") == ["用户最喜欢鼓浪屿"]


def test_a_correction_keeps_the_key_of_what_it_corrects() -> None:
    before, after = only("I prefer spaces."), only("Actually, I prefer tabs over spaces.")
    assert before["key"] == after["key"] == "indentation"
    assert after["category"] == "correction"
    zh_before, zh_after = only("我喜欢深色主题。"), only("不对，我不喜欢深色主题。")
    assert zh_before["key"] == zh_after["key"] and zh_after["category"] == "correction"


def test_a_key_an_earlier_llm_run_used_is_reused() -> None:
    rows: list[Row] = [{"id": "u1", "role": "user", "content": "From now on, answer in English."}]
    [fact] = extractor.extract_facts(rows, existing_facts=[{"id": "f", "key": "preferred_language", "content": "x"}])
    assert fact["key"] == "preferred_language"


WORDS = st.sampled_from(
    ["I", "prefer", "always", "never", "my", "name", "is", "actually", ",", ".", "?", "我", "喜欢", "以后", "请",
     "不对", "，", "。", "？", "这次", "you can", "comment", "中文", "tabs", "I'm a", "developer", "\n", " "]
)  # fmt: skip


@hsettings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=300), st.lists(WORDS, max_size=60).map("".join)))
def test_any_text_gives_valid_candidates_quoting_the_message(text: str) -> None:
    from facts.judging.schemas import parse_update

    facts = facts_of(text)
    assert all(p.valid for p in parse_update({"facts": facts}))
    assert all(f["evidence_text"] and f["evidence_text"] in text for f in facts)


def test_a_huge_message_is_read_quickly_and_yields_a_bounded_number_of_facts() -> None:
    import time

    texts = [
        "comment " * 12_000,  # an unbounded ".*" in a topic pattern took 81 s on this
        "注释" * 50_000,
        "".join(f"I prefer option {i}. " for i in range(5_000)),
    ]
    for text in texts:
        started = time.perf_counter()
        facts = facts_of(text[:100_000])
        assert time.perf_counter() - started < 5
        assert len(facts) <= extractor.MAX_FACTS_PER_MESSAGE


# --- choosing the extractor ----------------------------------------------------------------------


def test_without_a_model_server_the_rules_are_active(no_model: None) -> None:
    assert active_extractor() == "rules"
    result = extract([{"id": "u1", "role": "user", "content": "I prefer concise answers."}])
    assert result.extractor == "rules" and result.model_name == extractor.NAME
    [parsed] = result.parsed
    assert parsed.valid and parsed.value.key == "response_length"


def test_memory_extractor_chooses_even_when_a_model_is_configured(openai_stub: OpenAIStub, settings: Any) -> None:
    assert active_extractor() == "llm"
    settings.MEMORY_EXTRACTOR = "rules"
    extract([{"id": "u1", "role": "user", "content": "I prefer concise answers."}])
    assert openai_stub.requests == []


def test_an_unknown_extractor_is_an_error_not_a_silent_default(settings: Any) -> None:
    settings.MEMORY_EXTRACTOR = "magic"
    with pytest.raises(ExtractionError, match="MEMORY_EXTRACTOR"):
        active_extractor()


# --- through the pipeline (database) ---------------------------------------------------------


def user_turn(text: str, uid: str = "u1") -> list[dict[str, Any]]:
    return [{"role": "user", "content": text, "id": uid}, {"role": "assistant", "content": "好的。", "id": uid + "-a"}]


@pytest.mark.django_db
def test_a_turn_posted_with_no_model_becomes_memory_and_the_run_says_rules(no_model: None) -> None:
    record_turn(**THREAD, messages=user_turn("我主要做 Python 后端开发，平时请用中文解释技术问题。"), flush=True)
    run = ExtractionRun.objects.get()
    assert (run.status, run.extractor, run.model_name) == ("succeeded", "rules", extractor.NAME)
    keys = set(FactCard.objects.filter(status="active").values_list("key", flat=True))
    assert keys == {"primary_stack", "response_language"}
    text = render_context(user_id="alice", agent_name="coder").text
    assert "用户希望平时用中文解释技术问题" in text


@pytest.mark.django_db
def test_a_repeated_preference_is_a_duplicate_and_a_changed_one_replaces_it(no_model: None) -> None:
    run_turns_now(**THREAD, messages=user_turn("I prefer spaces for indentation.", "u1"))
    run_turns_now(**{**THREAD, "thread_id": "t2"}, messages=user_turn("I prefer spaces for indentation.", "u1"))
    assert [c.reasons for c in Candidate.objects.order_by("pk")] == [[], ["duplicate"]]
    assert FactCard.objects.filter(status="active").count() == 1
    run_turns_now(**{**THREAD, "thread_id": "t3"}, messages=user_turn("Actually, I prefer tabs.", "u1"))
    active = FactCard.objects.get(status="active")
    assert (active.key, active.content, active.category) == ("indentation", "User prefers tabs.", "correction")
    assert FactCard.objects.get(status="superseded").superseded_by == active.id


@pytest.mark.django_db
def test_temporary_and_transactional_statements_go_to_the_review_queue(no_model: None) -> None:
    run_turns_now(**THREAD, messages=user_turn("这次先用英文回答吧。你可以直接部署到生产环境。"))
    assert FactCard.objects.count() == 0
    reasons = sorted(tuple(c.reasons) for c in Candidate.objects.all())
    assert reasons == [("scope_thread", "temporary"), ("temporary", "transactional")]


@pytest.mark.django_db
def test_ingest_runs_the_rules_for_lines_without_model_output(no_model: None, tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    line = {**THREAD, "messages": user_turn("我是一名前端工程师，以后请叫我小王。")}
    path.write_text(json.dumps(line, ensure_ascii=False))
    out = io.StringIO()
    with contextlib.suppress(CommandError):
        call_command("ingest", str(path), "--json", stdout=out, stderr=io.StringIO())
    [result] = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [(c["key"], c["verdict"]) for c in result["candidates"]] == [
        ("occupation", "accepted"), ("preferred_name", "accepted"),
    ]  # fmt: skip
    assert ExtractionRun.objects.get().extractor == "rules"


@pytest.mark.django_db
def test_with_a_model_configured_the_model_is_called_as_before(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    run_turns_now(**THREAD, messages=user_turn("我主要做 Python 后端开发，平时请用中文解释技术问题。"))
    assert len(openai_stub.requests) == 1
    run = ExtractionRun.objects.get()
    assert (run.extractor, run.model_name) == ("llm", "stub-model")


@pytest.mark.django_db
def test_a_greeting_only_turn_is_skipped_and_still_says_which_extractor(no_model: None) -> None:
    run_turns_now(**THREAD, messages=user_turn("你好"))
    run = ExtractionRun.objects.get()
    assert (run.status, run.extractor, run.model_name) == ("skipped", "rules", extractor.NAME)


@pytest.mark.django_db
def test_a_replay_records_no_extractor(no_model: None) -> None:
    run_turns_now(**THREAD, messages=user_turn("I prefer tabs."), model_output={"facts": []})
    assert ExtractionRun.objects.get().extractor == ""


def test_the_overview_says_which_extractor_is_active(viewer_client: Any, no_model: None, settings: Any) -> None:
    page = viewer_client.get("/").content.decode()
    assert "Extractor: <strong>rules (built-in, no model; no MEMORY_LLM_BASE_URL)</strong>" in page
    settings.MEMORY_LLM_BASE_URL = "http://127.0.0.1:9/v1"
    settings.MEMORY_LLM_MODEL = "qwen"
    assert "llm (qwen at http://127.0.0.1:9/v1)" in viewer_client.get("/").content.decode()
