"""Retrieval evaluation on MemoryBank's conversations (issue 36), shared by
`bench/bench_memorybank.py` (which prints it) and `tests/test_memorybank_eval.py` (which
holds its floor).

The data: MemoryBank's evaluation set (Zhong et al., AAAI 2024, MIT licence), 15 people ×
10 dated days of chat in English and in Chinese, with our labels in
``tests/data/memorybank/`` (README there): per user line the facts a curator keeps, per
probing question the lines whose exchange answers it (``evidence``), on which ``side``
(user, assistant, both) and its ``category``.

Two stores, as the hidden LoCoMo-like benchmark of the issue builds them, each person one
``user_id`` (one per language: ``en-03``, ``zh-03``):

- **turns**: every user message and every assistant reply is a card (source message id =
  the line id, ``…:a`` for the reply);
- **facts**: the labelled facts and events of the user lines are the cards (source message
  id = their line id): statement-form memory, what a good extractor keeps.

A question's evidence is its lines; a line is found when a card of that line on the
question's side is in the top k (either side for ``both``; in the facts store only the
user side exists, so questions answered by the assistant alone are left out there, as
are lines no fact was kept from). Recall@k is the share of a question's lines found,
hit@k whether any was, MRR the first found rank in the top 10.

Cards go straight into the index of the current ``MEMORY_ROOT`` through `index.update`
(the write hook's own entry), so no database is needed.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "memorybank"
AGENT = "memorybank"
STORES = ("turns", "facts")
# The same cards with the 15 people of a language in one scope (~1,130 turn cards a scope,
# LoCoMo's conversations have ~600 turns): a harder ranking, the other people's lines as
# distractors. Only the asker's lines count; no-answer queries are not asked there.
POOLED = ("turns-pooled", "facts-pooled")
LANGS = ("en", "zh")
# Category order in the tables; `unanswerable` and `no-answer` are not counted in recall.
CATEGORIES = ("single", "assistant", "multi", "temporal")
NO_ANSWER = ("no-answer", "unanswerable")
K = 5
DEEP = 10  # MRR and the limit-10 answer
# The histories run 2023-04-27 … 2023-05-06.
UNDATED_NOW = datetime(2023, 5, 7, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Dating:
    """How cards are dated and when the question is asked."""

    name: str
    label: str
    dated: bool
    stretch: int = 1  # days of the history map to `stretch` days (LoCoMo's histories span months)
    later_days: int = 1  # `now` is this many days after the last day of the history


DATINGS = (
    Dating("undated", "undated (every card written now)", dated=False),
    Dating("dated", "dated by the line, asked the next day", dated=True),
    Dating("later", "dated, asked 6 months later", dated=True, later_days=183),
    Dating("stretched", "dated, 10 days spread over 9 months, asked the next day", dated=True, stretch=30),
)


@dataclass
class Unit:
    """One card of a store."""

    fact_id: str
    line: str  # the line id whose exchange it comes from
    side: str  # "user" or "assistant"
    content: str
    day: date
    order: int  # position in the person's history (time of day)


@dataclass
class Question:
    id: str
    lang: str
    split: str
    user_id: str
    query: str
    category: str
    side: str
    evidence: list[str]


@dataclass
class Store:
    name: str
    units: dict[str, Unit] = field(default_factory=dict)  # fact id -> unit
    users: dict[str, list[str]] = field(default_factory=dict)  # user id -> fact ids
    lines_with_facts: set[str] = field(default_factory=set)
    pooled: bool = False

    @property
    def kind(self) -> str:
        """ "turns" or "facts"."""
        return self.name.split("-")[0]

    def scope_of(self, question: Question) -> str:
        return question.lang if self.pooled else question.user_id

    def pool(self) -> Store:
        """The same cards, one scope per language."""
        users: dict[str, list[str]] = {}
        for user, ids in self.users.items():
            users.setdefault(user.split("-")[0], []).extend(ids)
        return Store(f"{self.name}-pooled", self.units, users, self.lines_with_facts, pooled=True)


def person_of(item_id: str) -> str:
    """`en-03-2023-04-27-01` or `en-q03-00` → `en-03`."""
    match = re.match(r"^(en|zh)-[qn]?(\d+)", item_id)
    if not match:
        raise ValueError(f"not a MemoryBank id: {item_id}")
    return f"{match.group(1)}-{match.group(2)}"


def fact_id(label: str) -> str:
    return "fact_" + hashlib.sha256(label.encode()).hexdigest()[:12]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load(data: Path = DATA, *, pooled: bool = False) -> tuple[dict[str, Store], list[Question]]:
    """The two stores (and with `pooled` their pooled forms) and the labelled questions
    of both languages."""
    stores = {name: Store(name) for name in STORES}
    questions: list[Question] = []
    for lang in LANGS:
        for order, line in enumerate(_jsonl(data / f"lines_{lang}.jsonl")):
            user = person_of(line["id"])
            day = date.fromisoformat(line["date"])
            sides = (("user", line["user"], ""), ("assistant", line["assistant"], ":a"))
            for side, text, suffix in sides:
                if text and text.strip():
                    _add(stores["turns"], user, Unit(fact_id(line["id"] + suffix), line["id"], side, text, day, order))
            for n, fact in enumerate(line.get("facts") or []):
                _add(
                    stores["facts"],
                    user,
                    Unit(fact_id(f"{line['id']}#{n}"), line["id"], "user", fact["content"], day, order),
                )
                stores["facts"].lines_with_facts.add(line["id"])
        for row in _jsonl(data / f"questions_{lang}.jsonl"):
            if not row.get("category"):
                continue  # not labelled yet
            questions.append(
                Question(
                    id=row["id"],
                    lang=lang,
                    split=row["split"],
                    user_id=person_of(row["id"]),
                    query=row["query"],
                    category=row["category"],
                    side=row.get("side") or "user",
                    evidence=list(row.get("evidence") or []),
                )
            )
    if pooled:
        stores.update({store.pool().name: store.pool() for store in list(stores.values())})
    return stores, questions


def _add(store: Store, user: str, unit: Unit) -> None:
    store.units[unit.fact_id] = unit
    store.users.setdefault(user, []).append(unit.fact_id)


def created_at(unit: Unit, dating: Dating, first: date) -> datetime:
    if not dating.dated:
        return UNDATED_NOW
    day = first + timedelta(days=(unit.day - first).days * dating.stretch)
    # Lines of a day keep their order (a minute apart).
    return datetime(day.year, day.month, day.day, 9, 0, tzinfo=UTC) + timedelta(minutes=unit.order % 600)


def now_for(store: Store, dating: Dating) -> datetime:
    if not dating.dated:
        return UNDATED_NOW
    first = min(u.day for u in store.units.values())
    last = max(created_at(u, dating, first) for u in store.units.values())
    return datetime(last.year, last.month, last.day, 12, 0, tzinfo=UTC) + timedelta(days=dating.later_days)


def index_store(store: Store, dating: Dating) -> None:
    """Every unit of `store` as an active card in the current index (again with new
    dates when called again: the same ids are updated, vectors stay cached)."""
    from facts.storage.cardfile import Card, Source
    from retrieval import index, indexconn

    # An empty store's index is made by its first read; a write never waits for one.
    indexconn.connection()
    first = min(u.day for u in store.units.values())
    cards = []
    for user, ids in store.users.items():
        for fid in ids:
            unit = store.units[fid]
            when = created_at(unit, dating, first)
            cards.append(
                Card(
                    id=fid,
                    key=f"mb_{fid}",
                    category="context",
                    confidence=0.9,
                    user_id=user,
                    agent_name=AGENT,
                    created_at=when,
                    updated_at=when,
                    source=Source(kind="manual", message_id=unit.line + (":a" if unit.side == "assistant" else "")),
                    content=unit.content,
                )
            )
    for start in range(0, len(cards), 500):
        index.update(cards[start : start + 500], [])


def evidence_for(question: Question, store: Store) -> list[str]:
    """The question's evidence lines this store can hold ([] = not asked of this store)."""
    if question.category in NO_ANSWER:
        return []
    if store.kind == "facts":
        if question.side == "assistant":
            return []
        return [line for line in question.evidence if line in store.lines_with_facts]
    return list(question.evidence)


def asked(question: Question, store: Store) -> bool:
    if question.category in NO_ANSWER:
        return not store.pooled
    return bool(evidence_for(question, store))


def found_lines(question: Question, store: Store, ids: Iterable[str]) -> list[str | None]:
    """For each ranked fact id, the evidence line it finds (None when it finds none)."""
    wanted = set(evidence_for(question, store))
    out: list[str | None] = []
    for fid in ids:
        unit = store.units.get(fid)
        ok = (
            unit is not None
            and unit.line in wanted
            and (question.side == "both" or unit.side == question.side or store.kind == "facts")
        )
        out.append(unit.line if ok and unit is not None else None)
    return out


Searcher = Callable[[str, str, int, datetime], list[str]]


@dataclass
class Outcome:
    question: Question
    top5: list[str]
    top10: list[str]
    ms: float
    recall: float | None = None
    hit: float | None = None
    rr: float | None = None
    all10: float | None = None  # questions with two or more evidence lines: all in the top 10


def run(store: Store, questions: list[Question], searcher: Searcher, now: datetime) -> list[Outcome]:
    """Each question searched at limit 5 and at limit 10."""
    outcomes = []
    for question in questions:
        if not asked(question, store):
            continue
        started = time.perf_counter()
        top5 = searcher(question.query, store.scope_of(question), K, now)
        ms = (time.perf_counter() - started) * 1000
        top10 = searcher(question.query, store.scope_of(question), DEEP, now)
        outcome = Outcome(question, top5, top10, ms)
        wanted = evidence_for(question, store)
        if wanted:
            got5 = {line for line in found_lines(question, store, top5) if line}
            outcome.recall = len(got5) / len(set(wanted))
            outcome.hit = 1.0 if got5 else 0.0
            ranks = [r for r, line in enumerate(found_lines(question, store, top10), 1) if line]
            outcome.rr = 1 / ranks[0] if ranks else 0.0
            if len(set(wanted)) > 1:
                got10 = {line for line in found_lines(question, store, top10) if line}
                outcome.all10 = 1.0 if got10 >= set(wanted) else 0.0
        outcomes.append(outcome)
    return outcomes


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    """recall@5, hit@5, MRR overall, per category and per language; the no-answer
    queries' false-result rate; identity of the top 5 at limits 5 and 10; latency."""

    def figures(rows: list[Outcome]) -> dict[str, float | int]:
        scored = [o for o in rows if o.recall is not None]
        if not scored:
            return {"n": 0}
        return {
            "n": len(scored),
            "recall@5": round(statistics.fmean(o.recall for o in scored if o.recall is not None), 3),
            "hit@5": round(statistics.fmean(o.hit for o in scored if o.hit is not None), 3),
            "mrr": round(statistics.fmean(o.rr for o in scored if o.rr is not None), 3),
        }

    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        groups["all"].append(o)
        groups[o.question.category].append(o)
        groups[o.question.lang].append(o)
    result: dict[str, Any] = {name: figures(rows) for name, rows in groups.items() if name not in NO_ANSWER}
    nothing = [o for o in outcomes if o.question.category == "no-answer"]
    result["no_answer"] = {
        "n": len(nothing),
        "with_results": sum(1 for o in nothing if o.top5),
        "false_result_rate": round(sum(1 for o in nothing if o.top5) / len(nothing), 3) if nothing else None,
    }
    several = [o.all10 for o in outcomes if o.all10 is not None]
    result["all_evidence_top10"] = {
        "n": len(several),
        "rate": round(statistics.fmean(several), 3) if several else None,
    }
    result["identical_5_10"] = round(statistics.fmean(o.top10[:K] == o.top5 for o in outcomes), 3) if outcomes else None
    times = sorted(o.ms for o in outcomes)
    result["ms_p50"] = round(times[len(times) // 2], 2) if times else None
    result["ms_p99"] = round(times[min(len(times) - 1, int(len(times) * 0.99))], 2) if times else None
    return result


def searcher(mode: str) -> Searcher:
    """Search as the agents' tool does (``mode``: hybrid, lexical or vectors)."""
    from retrieval.search import search

    def call(query: str, user_id: str, limit: int, now: datetime) -> list[str]:
        return [hit.id for hit in search(query, user_id=user_id, agent_name=AGENT, limit=limit, now=now, mode=mode)]

    return call


# Queries about nothing these people talked about (issue 36's "pytest for a user with no
# such fact"): asked of every person, counted where no word of the query is in any card
# of the scope. Any result is a false one.
UNRELATED = (
    "pytest",
    "kubernetes ingress",
    "PostgreSQL 16 migration",
    "carburetor repair",
    "mortgage refinancing",
    "oboe reeds",
    "tax return deadline",
    "Which compiler flags does the build use?",
    "量子计算",
    "报销发票",
    "docker 镜像",
    "汽车保险续保",
    "我的护照号码是多少？",
    "项目用的是什么数据库",
)


def unrelated_rate(store: Store, searcher: Searcher, now: datetime) -> tuple[int, int]:
    """(queries with a result, queries asked) over `UNRELATED` × every scope, counting
    only queries none of whose words (tokens, stop-words aside) is in the scope's cards."""
    from retrieval.tokenize import query_terms, tokenize

    asked = found = 0
    for scope, ids in store.users.items():
        words = {token for fid in ids for token in tokenize(store.units[fid].content)}
        for query in UNRELATED:
            if set(query_terms(query)) & words:
                continue
            asked += 1
            found += bool(searcher(query, scope, K, now))
    return found, asked
