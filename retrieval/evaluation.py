"""Judge-free retrieval regression: a team's labelled questions through the agents' search.

A questions file is JSON Lines, one question a line::

    {"id": "q1", "user_id": "alice", "agent_name": "coder", "project_id": "shop",
     "query": "which database?", "expected_fact_ids": ["fact_…"], "expected_message_ids": ["m-17"]}

``project_id`` and both ``expected_*`` lists are optional. A message id matches a card
whose ``source.message_id`` is that id (the user message the fact was taken from), so a
team can label the conversation once and keep its labels through re-extraction. A
question with no expected item is a *no-answer* question: any result is a false one.

Every question goes through `retrieval.search.search`, the function behind the agents'
``memory_search`` tool, the API's ``/search`` and MCP, in this one process; the first
search (model load, query path) is made before anything is timed. No LLM judges
anything: an expected item is found at a rank or not at all.

    questions = load_questions("questions.jsonl")   # QuestionsError names the bad line
    report = run(questions, limit=5)                # Report: one Outcome per question
    report.summary().recall                         # recall@5 over questions with expectations
    report.summary(k=3)                             # the same figures within the top 3
    report.as_dict()                                # what ``manage.py evaluate --json`` prints

`run` takes another ``search_fn`` (same keywords as `search`) to measure a variant side
by side, and another ``source_messages`` when the cards were put straight into the
index with no mirror rows (benchmarks).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from facts.intake.turns import TurnRejected, clean_id
from facts.storage.errors import InvalidId
from facts.storage.ids import check_fact_id, normalize_agent

REQUIRED = ("id", "user_id", "agent_name", "query")
OPTIONAL = ("project_id", "expected_fact_ids", "expected_message_ids")
MAX_LIMIT = 100  # `search`'s own bound; the command keeps to the tool's 1..10
# A query no question asks, so warming leaves no question's vector in the query cache;
# Latin and Han, so both tokenizer paths are loaded.
WARM_QUERY = "warm-up 预热"


class QuestionsError(ValueError):
    """A questions file that cannot be run; str() is one line naming the file and line."""


@dataclass(frozen=True)
class Question:
    id: str
    user_id: str
    agent_name: str
    query: str
    project_id: str | None = None
    expected_fact_ids: tuple[str, ...] = ()
    expected_message_ids: tuple[str, ...] = ()
    line: int = 0  # where it came from in its file (0: built in code)

    @property
    def answerable(self) -> bool:
        return bool(self.expected_fact_ids or self.expected_message_ids)


class _HasId(Protocol):
    @property
    def id(self) -> str: ...


SearchFn = Callable[..., Sequence[_HasId]]
SourceMessages = Callable[[Sequence[str]], Mapping[str, str]]


@dataclass(frozen=True)
class Outcome:
    """One question's answer: the ranked fact ids, the source message of each, and the
    rank (1-based) at which each expected item was found, None when it was not."""

    question: Question
    fact_ids: tuple[str, ...]
    # The source message of each ranked fact, "" when it has none; looked up only for
    # questions that expect messages.
    message_ids: tuple[str, ...]
    ms: float

    def fact_ranks(self, k: int | None = None) -> dict[str, int | None]:
        top = self.fact_ids[: k or len(self.fact_ids)]
        return {fid: (top.index(fid) + 1 if fid in top else None) for fid in self.question.expected_fact_ids}

    def message_ranks(self, k: int | None = None) -> dict[str, int | None]:
        top = self.message_ids[: k or len(self.message_ids)]
        return {mid: (top.index(mid) + 1 if mid in top else None) for mid in self.question.expected_message_ids}

    def ranks(self, k: int | None = None) -> list[int | None]:
        """The rank of every expected item (facts, then messages)."""
        return [*self.fact_ranks(k).values(), *self.message_ranks(k).values()]

    def recall(self, k: int | None = None) -> float | None:
        """Fraction of the expected items in the top k (None: a no-answer question)."""
        ranks = self.ranks(k)
        return sum(rank is not None for rank in ranks) / len(ranks) if ranks else None

    def reciprocal_rank(self, k: int | None = None) -> float | None:
        found = [rank for rank in self.ranks(k) if rank is not None]
        if not self.question.answerable:
            return None
        return 1 / min(found) if found else 0.0

    def as_dict(self) -> dict[str, Any]:
        question = self.question
        data: dict[str, Any] = {
            "id": question.id,
            "line": question.line,
            "query": question.query,
            "results": list(self.fact_ids),
            "ms": round(self.ms, 3),
        }
        if question.answerable:
            data["found"] = {"facts": self.fact_ranks(), "messages": self.message_ranks()}
            data["recall"] = round(self.recall() or 0.0, 4)
            data["reciprocal_rank"] = round(self.reciprocal_rank() or 0.0, 4)
        else:
            data["false_result"] = bool(self.fact_ids)
        return data


@dataclass(frozen=True)
class Summary:
    k: int
    questions: int
    answerable: int
    no_answer: int
    recall: float | None  # mean over answerable questions of found / expected in the top k
    hit: float | None  # fraction of answerable questions with at least one found
    mrr: float | None  # mean of 1 / rank of the first expected item found (0 when none)
    false_results: int  # no-answer questions that got any result
    false_result_rate: float | None
    p50_ms: float | None
    p99_ms: float | None

    def as_dict(self) -> dict[str, Any]:
        def rounded(value: float | None, places: int) -> float | None:
            return None if value is None else round(value, places)

        return {
            "k": self.k,
            "questions": self.questions,
            "answerable": self.answerable,
            "no_answer": self.no_answer,
            "recall_at_k": rounded(self.recall, 4),
            "hit_at_k": rounded(self.hit, 4),
            "mrr": rounded(self.mrr, 4),
            "false_results": self.false_results,
            "false_result_rate": rounded(self.false_result_rate, 4),
            "p50_ms": rounded(self.p50_ms, 3),
            "p99_ms": rounded(self.p99_ms, 3),
        }


@dataclass(frozen=True)
class Report:
    limit: int
    outcomes: tuple[Outcome, ...] = field(default_factory=tuple)

    def summary(self, k: int | None = None) -> Summary:
        """The figures within the top `k` (the search's limit when not given; a smaller
        k reads the same ranked lists, it does not search again)."""
        k = self.limit if k is None else k
        if not 1 <= k <= self.limit:
            raise ValueError(f"k must be within 1..{self.limit} (the limit searched)")
        answerable = [o for o in self.outcomes if o.question.answerable]
        no_answer = [o for o in self.outcomes if not o.question.answerable]
        false = sum(bool(o.fact_ids[:k]) for o in no_answer)
        times = sorted(o.ms for o in self.outcomes)
        return Summary(
            k=k,
            questions=len(self.outcomes),
            answerable=len(answerable),
            no_answer=len(no_answer),
            recall=_mean([o.recall(k) or 0.0 for o in answerable]),
            hit=_mean([float(bool(o.recall(k))) for o in answerable]),
            mrr=_mean([o.reciprocal_rank(k) or 0.0 for o in answerable]),
            false_results=false,
            false_result_rate=false / len(no_answer) if no_answer else None,
            p50_ms=percentile(times, 50),
            p99_ms=percentile(times, 99),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "limit": self.limit,
            "questions": [outcome.as_dict() for outcome in self.outcomes],
            "summary": self.summary().as_dict(),
        }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def percentile(sorted_values: Sequence[float], p: float) -> float | None:
    """The nearest-rank percentile: the smallest value with at least p % of the values at
    or below it (p99 of fewer than 100 values is the slowest)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


# --- reading a questions file ----------------------------------------------------


def load_questions(path: str | Path) -> list[Question]:
    """Every question of a JSON Lines file, checked; blank lines are skipped."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise QuestionsError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise QuestionsError(f"{path}: is a directory, not a questions file") from None
    except OSError as exc:
        raise QuestionsError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return parse_questions(raw.split(b"\n"), name=str(path))


def parse_questions(lines: Iterable[bytes | str], *, name: str = "questions") -> list[Question]:
    questions: list[Question] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        where = f"{name} line {number}"
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError:
                raise QuestionsError(f"{where}: not UTF-8 text") from None
        if not line.strip():
            continue
        try:
            question = _question(line, number)
        except QuestionsError as exc:
            raise QuestionsError(f"{where}: {exc}") from None
        if question.id in first_line:
            raise QuestionsError(f"{where}: id {question.id!r} is used again (first on line {first_line[question.id]})")
        first_line[question.id] = number
        questions.append(question)
    if not questions:
        raise QuestionsError(f"{name}: no questions (the file is empty or only blank lines)")
    return questions


def _question(line: str, number: int) -> Question:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise QuestionsError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise QuestionsError("not valid JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise QuestionsError(f"expected a JSON object, got {_json_kind(data)}")
    missing = [key for key in REQUIRED if key not in data]
    # A misspelt "expected_fact_id" would silently make an answerable question a
    # no-answer one: refuse it rather than measure the wrong thing.
    unknown = sorted(set(data) - set(REQUIRED) - set(OPTIONAL))
    problems = [_fields("missing", missing), _fields("unknown", unknown)]
    if missing or unknown:
        raise QuestionsError("; ".join(problem for problem in problems if problem))
    qid = data["id"]
    if isinstance(qid, bool) or not isinstance(qid, str | int) or qid == "":
        raise QuestionsError("id must be a non-empty string or a whole number")
    query = data["query"]
    if not isinstance(query, str) or not query.strip():
        raise QuestionsError("query must be a non-empty string")
    try:
        user_id = clean_id("user_id", data["user_id"], required=True)
        project_id = clean_id("project_id", data.get("project_id"), required=False)
    except TurnRejected as exc:
        raise QuestionsError(str(exc)) from None
    agent_name = data["agent_name"]
    if not isinstance(agent_name, str) or not agent_name.strip():
        raise QuestionsError("agent_name must be a non-empty string")
    try:
        normalize_agent(agent_name)
    except InvalidId as exc:
        raise QuestionsError(str(exc)) from None
    return Question(
        id=str(qid),
        user_id=str(user_id),
        agent_name=agent_name,
        query=query,
        project_id=project_id,
        expected_fact_ids=_id_list(data, "expected_fact_ids", fact_ids=True),
        expected_message_ids=_id_list(data, "expected_message_ids", fact_ids=False),
        line=number,
    )


def _id_list(data: dict[str, Any], key: str, *, fact_ids: bool) -> tuple[str, ...]:
    value = data.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise QuestionsError(f"{key} must be a list of non-empty strings")
    if fact_ids:
        for item in value:
            try:
                check_fact_id(item)
            except InvalidId:
                raise QuestionsError(f"{key}: {item!r} is not a fact id ('fact_' and 12 hex digits)") from None
    return tuple(dict.fromkeys(value))  # a repeated id is one expected item


def _fields(what: str, names: list[str]) -> str:
    if not names:
        return ""
    return f"{what} field{'s' if len(names) > 1 else ''} {', '.join(names)}"


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    return "a number" if isinstance(value, int | float) else type(value).__name__


# --- running them --------------------------------------------------------------------


def mirror_source_messages(fact_ids: Sequence[str]) -> dict[str, str]:
    """The source message id of each card, from the DB mirror ("" when it has none)."""
    from facts.models import FactCard

    rows = FactCard.objects.filter(id__in=list(fact_ids)).values_list("id", "source_message_id")
    return {fid: mid for fid, mid in rows}


def run(
    questions: Sequence[Question],
    *,
    limit: int = 5,
    now: datetime | None = None,
    search_fn: SearchFn | None = None,
    source_messages: SourceMessages | None = None,
    warm: bool = True,
    on_outcome: Callable[[Outcome], None] | None = None,
) -> Report:
    """Search every question's scope for its query, in file order, and time each search.

    `limit` is the depth searched (1..100; the agents' tool asks for 1..10). `now` fixes
    the clock decay reads (tests, benchmarks). `on_outcome` is told of each question as
    it completes (the command prints it at once)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be a whole number within 1..{MAX_LIMIT}")
    if search_fn is None:
        from retrieval import search as search_module

        search_fn = search_module.search
    lookup = source_messages or mirror_source_messages
    if warm and questions:
        # The model, the query path, jieba and the index connection: what a serving
        # process has loaded before its first agent asks.
        from .warmup import warm as warm_process

        warm_process(queries=True)
        first = questions[0]
        search_fn(
            WARM_QUERY, user_id=first.user_id, agent_name=first.agent_name, project_id=first.project_id, limit=limit
        )
    outcomes = []
    for question in questions:
        start = time.perf_counter()
        hits = search_fn(
            question.query,
            user_id=question.user_id,
            agent_name=question.agent_name,
            project_id=question.project_id,
            limit=limit,
            now=now,
        )
        ms = (time.perf_counter() - start) * 1000
        fact_ids = tuple(hit.id for hit in hits)[:limit]
        messages = lookup(fact_ids) if fact_ids and question.expected_message_ids else {}
        outcome = Outcome(question, fact_ids, tuple(messages.get(fid, "") for fid in fact_ids), ms)
        outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    return Report(limit=limit, outcomes=tuple(outcomes))


# --- the text report -----------------------------------------------------------------


def outcome_line(outcome: Outcome) -> str:
    """One question as the command prints it: id, time, ranked fact ids, what was expected."""
    question = outcome.question
    results = " ".join(outcome.fact_ids) or "(nothing)"
    if question.answerable:
        found = ", ".join(
            f"{item} #{rank}" if rank is not None else f"{item} missing"
            for item, rank in (*outcome.fact_ranks().items(), *outcome.message_ranks().items())
        )
        tail = f"expected: {found}"
    else:
        n = len(outcome.fact_ids)
        tail = f"no-answer: {n} result{'s' if n != 1 else ''} (false result)" if n else "no-answer: nothing found"
    return f"{question.id}  {outcome.ms:.1f} ms  {results}  {tail}"


def summary_lines(summary: Summary, *, limit: int) -> list[str]:
    def figure(value: float | None) -> str:
        return "—" if value is None else f"{value:.3f}"

    k = summary.k
    lines = [
        f"{summary.questions} question{'s' if summary.questions != 1 else ''}: {summary.answerable} with expected answers, "
        f"{summary.no_answer} no-answer; limit {limit}",
    ]
    if summary.answerable:
        lines.append(f"recall@{k} {figure(summary.recall)}  hit@{k} {figure(summary.hit)}  MRR {figure(summary.mrr)}")
    else:
        lines.append(f"recall@{k} —  hit@{k} —  MRR — (no question has expected answers)")
    if summary.no_answer:
        lines.append(
            f"no-answer questions with any result: {summary.false_results} of {summary.no_answer}"
            f" (false-result rate {figure(summary.false_result_rate)})"
        )
    else:
        lines.append("false-result rate — (no no-answer questions)")
    p50 = "—" if summary.p50_ms is None else f"{summary.p50_ms:.1f} ms"
    p99 = "—" if summary.p99_ms is None else f"{summary.p99_ms:.1f} ms"
    lines.append(f"latency p50 {p50}  p99 {p99} ({summary.questions} searches, warm, one process)")
    return lines
