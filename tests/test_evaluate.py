"""`manage.py evaluate` and `retrieval.evaluation`: labelled questions through the agents'
search, with exact recall@k, hit@k, MRR and false-result figures on a small store."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from facts.storage.cardfile import Source
from facts.storage.writer import save_card
from retrieval.evaluation import WARM_QUERY, Question, QuestionsError, load_questions, percentile, run
from retrieval.search import Hit, memory_search_json
from tests.conftest import FIXED_NOW

pytestmark = pytest.mark.django_db


@pytest.fixture
def cards(make_card) -> dict[str, str]:
    """Four facts of alice × coder, one of the project "shop", one of bob: label → id."""

    def card(label: str, content: str, message: str | None = None, **kw: Any) -> tuple[str, str]:
        source = Source(kind="extraction", thread_id="t1", message_id=message)
        return label, save_card(make_card(content=content, source=source, **kw), actor="t").id

    return dict(
        [
            card("db", "User deploys the shop api with PostgreSQL 16", "m-db"),
            card("pytest", "User writes every test with pytest", "m-test"),
            card("tabs", "User indents code with tabs", "m-tabs"),
            card("tea", "User drinks oolong tea in the afternoon"),
            card("redis", "The shop caches sessions in Redis", user_id=None, agent_name=None, project_id="shop"),
            card("bob", "User writes every test with pytest", "m-bob", user_id="bob"),
        ]
    )


def _questions(cards: dict[str, str]) -> list[dict[str, Any]]:
    alice = {"user_id": "alice", "agent_name": "coder"}
    return [
        {"id": "q1", **alice, "query": "PostgreSQL", "expected_fact_ids": [cards["db"]]},
        # Two expected items, one named by its fact, one by the message it came from.
        {
            "id": "q2",
            **alice,
            "query": "pytest tabs",
            "expected_fact_ids": [cards["pytest"]],
            "expected_message_ids": ["m-tabs"],
        },
        # "tea" matches two words, "tabs" one: the expected tabs fact is second; db is never found.
        {"id": "q3", **alice, "query": "oolong tea tabs", "expected_fact_ids": [cards["tabs"], cards["db"]]},
        {"id": "q4", **alice, "query": "tabs", "expected_fact_ids": [cards["pytest"]]},
        {"id": "q5", **alice, "project_id": "shop", "query": "Redis sessions", "expected_fact_ids": [cards["redis"]]},
        {"id": "n1", **alice, "query": "kubernetes"},
        {"id": "n2", "user_id": "carol", "agent_name": "coder", "query": "pytest"},  # a user with no memory
        {"id": "n3", **alice, "query": "afternoon", "expected_fact_ids": []},
    ]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def _evaluate(*args: str) -> str:
    out = StringIO()
    call_command("evaluate", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_it_scores_a_questions_file_exactly(cards, tmp_path) -> None:
    report = run(load_questions(_write(tmp_path / "q.jsonl", _questions(cards))), limit=5, now=FIXED_NOW)
    by_id = {o.question.id: o for o in report.outcomes}
    assert by_id["q1"].fact_ranks() == {cards["db"]: 1}
    assert sorted([*by_id["q2"].fact_ranks().values(), *by_id["q2"].message_ranks().values()]) == [1, 2]
    assert by_id["q3"].fact_ranks() == {cards["tabs"]: 2, cards["db"]: None}
    assert by_id["q3"].recall() == 0.5 and by_id["q3"].reciprocal_rank() == 0.5
    assert by_id["q4"].fact_ids == (cards["tabs"],) and by_id["q4"].recall() == 0.0
    assert by_id["q5"].fact_ids == (cards["redis"],)
    assert [by_id[n].fact_ids for n in ("n1", "n2")] == [(), ()]
    assert by_id["n3"].fact_ids == (cards["tea"],)
    summary = report.summary()
    assert (summary.questions, summary.answerable, summary.no_answer) == (8, 5, 3)
    assert summary.recall == pytest.approx((1 + 1 + 0.5 + 0 + 1) / 5)
    assert summary.hit == pytest.approx(4 / 5)
    assert summary.mrr == pytest.approx((1 + 1 + 0.5 + 0 + 1) / 5)
    assert (summary.false_results, summary.false_result_rate) == (1, pytest.approx(1 / 3))
    assert 0 < summary.p50_ms <= summary.p99_ms == max(o.ms for o in report.outcomes)


def test_it_reads_a_smaller_k_from_the_same_ranked_lists(cards, tmp_path) -> None:
    report = run(load_questions(_write(tmp_path / "q.jsonl", _questions(cards))), limit=5, now=FIXED_NOW)
    at1 = report.summary(k=1)
    # q2 finds one of its two items at rank 1; q3's item is at rank 2.
    assert at1.recall == pytest.approx((1 + 0.5 + 0 + 0 + 1) / 5)
    assert at1.hit == pytest.approx(3 / 5) and at1.mrr == pytest.approx(3 / 5)
    with pytest.raises(ValueError, match=r"1\.\.5"):
        report.summary(k=6)


def test_it_returns_what_the_agents_tool_returns(cards, tmp_path) -> None:
    questions = load_questions(_write(tmp_path / "q.jsonl", _questions(cards)))
    report = run(questions, limit=3)
    for outcome in report.outcomes:
        q = outcome.question
        tool = json.loads(
            memory_search_json(q.query, user_id=q.user_id, agent_name=q.agent_name, project_id=q.project_id, limit=3)
        )
        assert list(outcome.fact_ids) == [row["id"] for row in tool], q.id


def test_the_command_prints_a_line_per_question_and_the_figures(cards, tmp_path) -> None:
    out = _evaluate(str(_write(tmp_path / "q.jsonl", _questions(cards))))
    lines = out.splitlines()
    assert lines[0].startswith("q1  ") and f"{cards['db']}  expected: {cards['db']} #1" in lines[0]
    assert f"expected: {cards['tabs']} #2, {cards['db']} missing" in lines[2]
    assert lines[5].endswith("(nothing)  no-answer: nothing found")
    assert lines[7].endswith(f"{cards['tea']}  no-answer: 1 result (false result)")
    assert lines[8] == "8 questions: 5 with expected answers, 3 no-answer; limit 5"
    assert lines[9] == "recall@5 0.700  hit@5 0.800  MRR 0.700"
    assert lines[10] == "no-answer questions with any result: 1 of 3 (false-result rate 0.333)"
    assert lines[11].startswith("latency p50 ") and "p99" in lines[11]


def test_the_command_prints_json_with_each_question_and_the_summary(cards, tmp_path) -> None:
    data = json.loads(_evaluate(str(_write(tmp_path / "q.jsonl", _questions(cards))), "--json", "--limit", "1"))
    assert data["limit"] == 1
    assert [q["id"] for q in data["questions"]] == ["q1", "q2", "q3", "q4", "q5", "n1", "n2", "n3"]
    q3 = data["questions"][2]
    assert q3["results"] == [cards["tea"]] and q3["line"] == 3
    assert q3["found"] == {"facts": {cards["tabs"]: None, cards["db"]: None}, "messages": {}}
    assert q3["recall"] == 0.0 and q3["reciprocal_rank"] == 0.0
    assert data["questions"][7]["false_result"] is True and "found" not in data["questions"][7]
    summary = data["summary"]
    assert summary["k"] == 1 and summary["recall_at_k"] == 0.5 and summary["hit_at_k"] == 0.6 and summary["mrr"] == 0.6
    assert summary["false_results"] == 1 and summary["false_result_rate"] == 0.3333
    assert summary["p50_ms"] > 0 and summary["p99_ms"] >= summary["p50_ms"]


def test_a_message_id_matches_any_card_taken_from_that_message(make_card, tmp_path) -> None:
    source = Source(kind="extraction", thread_id="t1", message_id="m1")
    save_card(make_card(content="User works on Python backends", source=source), actor="t")
    second = save_card(make_card(content="User explains Python in Chinese", source=source), actor="t")
    question = Question("q", "alice", "coder", "Chinese", expected_message_ids=("m1",))
    [outcome] = run([question], limit=5).outcomes
    assert outcome.fact_ids == (second.id,) and outcome.message_ranks() == {"m1": 1}


def test_it_takes_another_search_and_source_messages_and_warms_first(tmp_path) -> None:
    calls: list[str] = []

    def fake_search(query: str, **kw: Any) -> list[Hit]:
        calls.append(query)
        hit = Hit("fact_00000000000a", "x", "preference", 0.9, 1.0, -1.0, 1.0, 0.18, FIXED_NOW)
        return [hit, hit]

    questions = [Question("q", "u", "a", "first question", expected_message_ids=("m9",))]
    report = run(questions, limit=1, search_fn=fake_search, source_messages=lambda ids: dict.fromkeys(ids, "m9"))
    assert calls == [WARM_QUERY, "first question"]  # the warm-up is a query no question asks
    assert report.outcomes[0].fact_ids == ("fact_00000000000a",)  # never more than the limit
    assert report.summary().recall == 1.0


def test_percentiles_are_nearest_rank() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 99) == 4.0
    assert percentile(list(map(float, range(1, 201))), 99) == 198.0
    assert percentile([], 50) is None


def test_a_file_with_only_no_answer_questions_has_no_recall(make_card, tmp_path) -> None:
    path = _write(tmp_path / "q.jsonl", [{"id": 1, "user_id": "alice", "agent_name": "coder", "query": "anything"}])
    lines = _evaluate(str(path)).splitlines()
    assert lines[0] == "1  " + lines[0].split("  ")[1] + "  (nothing)  no-answer: nothing found"
    assert lines[1:3] == [
        "1 question: 0 with expected answers, 1 no-answer; limit 5",
        "recall@5 —  hit@5 —  MRR — (no question has expected answers)",
    ]


GOOD = '{"id": "q1", "user_id": "alice", "agent_name": "coder", "query": "x"}'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD + '\n{"id": "q2", "user_id": }\n', " line 2: not valid JSON (Expecting value at column 25)"),
        ("[1, 2]\n", " line 1: expected a JSON object, got a list"),
        ('{"id": "q1", "agent_name": "coder"}\n', " line 1: missing fields user_id, query"),
        (
            '{"id": "q1", "user_id": "alice", "agent_name": "coder", "query": "x", "expected_fact_id": ["fact_000000000001"]}',
            " line 1: unknown field expected_fact_id",
        ),
        (
            '{"id": "q1", "user_id": "alice", "agent_name": "coder", "query": "  "}',
            " line 1: query must be a non-empty string",
        ),
        ('{"id": null, "user_id": "alice", "agent_name": "coder", "query": "x"}', " line 1: id must be a non-empty"),
        ('{"id": "q1", "user_id": "", "agent_name": "coder", "query": "x"}', " line 1: user_id: is required"),
        (
            '{"id": "q1", "user_id": "alice", "agent_name": "Coder Bot", "query": "x"}',
            " line 1: agent_name must be lower-case",
        ),
        (
            '{"id": "q1", "user_id": "alice", "agent_name": "coder", "query": "x", "expected_fact_ids": "fact_000000000001"}',
            " line 1: expected_fact_ids must be a list of non-empty strings",
        ),
        (
            '{"id": "q1", "user_id": "alice", "agent_name": "coder", "query": "x", "expected_fact_ids": ["db"]}',
            " line 1: expected_fact_ids: 'db' is not a fact id",
        ),
        (
            '{"id": "q1", "user_id": "alice", "agent_name": "coder", "query": "x", "expected_message_ids": [3]}',
            " line 1: expected_message_ids must be a list of non-empty strings",
        ),
        (GOOD + "\n\n" + GOOD + "\n", " line 3: id 'q1' is used again (first on line 1)"),
        ("\n  \n", ": no questions (the file is empty or only blank lines)"),
    ],
)
def test_bad_input_is_one_clear_line_naming_where(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CommandError) as caught:
        _evaluate(str(path))
    assert str(caught.value).startswith(f"{path}{message}")
    assert "\n" not in str(caught.value)


def test_a_file_that_is_not_utf8_names_its_line(tmp_path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_bytes(GOOD.encode() + b"\n\xff\xfe\n")
    with pytest.raises(QuestionsError, match=r" line 2: not UTF-8 text"):
        load_questions(path)


def test_a_missing_file_or_a_folder_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(CommandError, match=r"nope\.jsonl: no such file$"):
        _evaluate(str(tmp_path / "nope.jsonl"))
    with pytest.raises(CommandError, match="is a directory"):
        _evaluate(str(tmp_path))


def test_the_limit_is_the_tools_range(tmp_path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(GOOD + "\n", encoding="utf-8")
    with pytest.raises(CommandError, match=r"--limit must be within 1\.\.10"):
        _evaluate(str(path), "--limit", "11")
    with pytest.raises(CommandError, match=r"--limit must be within 1\.\.10"):
        _evaluate(str(path), "--limit", "0")


def test_a_utf8_bom_and_numeric_ids_are_accepted(tmp_path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_bytes(
        b"\xef\xbb\xbf" + json.dumps({"id": 7, "user_id": "alice", "agent_name": "coder", "query": "x"}).encode()
    )
    [question] = load_questions(path)
    assert question.id == "7" and not question.answerable


def test_with_embeddings_it_finds_a_cross_language_answer_as_the_tool_does(
    embeddings: None, make_card, tmp_path
) -> None:
    card = save_card(make_card(content="User lives in the Central European time zone."), actor="t")
    rows = [{"id": "tz", "user_id": "alice", "agent_name": "coder", "query": "时区", "expected_fact_ids": [card.id]}]
    data = json.loads(_evaluate(str(_write(tmp_path / "q.jsonl", rows)), "--json"))
    assert data["questions"][0]["found"]["facts"] == {card.id: 1}
    assert data["summary"]["recall_at_k"] == 1.0
    tool = json.loads(memory_search_json("时区", user_id="alice", agent_name="coder"))
    assert data["questions"][0]["results"] == [row["id"] for row in tool]
