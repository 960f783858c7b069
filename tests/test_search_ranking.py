"""Issue 36: questions find statements, the ranking does not depend on the limit, a query
about nothing the user said finds nothing, and the new-user examples of the issue."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from facts.storage.writer import save_card
from retrieval import embedding
from retrieval.dates import Day, mentioned
from retrieval.query import core
from retrieval.search import DATE_WEIGHT, search
from tests.conftest import FIXED_NOW

pytestmark = pytest.mark.django_db


def _contents(query: str, limit: int = 5) -> list[str]:
    return [hit.content for hit in search(query, user_id="alice", agent_name="coder", limit=limit, now=FIXED_NOW)]


@pytest.mark.parametrize(
    ("question", "kept"),
    [
        ("When did I mention the museum?", "I the museum"),
        ("Do you remember what exhibition I saw?", "exhibition I saw"),
        ("What's my cat's name?", "my cat's name"),
        ("I don't like working out, right?", "I don't like working out"),
        ("我曾经和你提到过我养的宠物，它叫什么名字？", "我我养宠物，它叫名字"),
        ("你还记得我们第一次聊了什么话题吗？", "我们第一次话题"),
        ("项目用的是什么数据库", "项目用数据库"),
        ("pytest", "pytest"),
        ("what", "what"),  # nothing else left: the query as it came
    ],
)
def test_it_strips_question_frames_in_both_languages(question: str, kept: str) -> None:
    assert core(question) == kept


def test_the_chinese_database_question_finds_the_postgresql_fact_first(embeddings: None, make_card) -> None:
    for content in (
        "shop-api 仓库统一使用 PostgreSQL 16",
        "用户偏好用中文解释技术问题",
        "Prefers answers as short bullet lists.",
        "Works in the Europe/Berlin time zone.",
    ):
        save_card(make_card(content=content), actor="t")
    assert _contents("项目用的是什么数据库")[0] == "shop-api 仓库统一使用 PostgreSQL 16"


def test_a_chinese_question_about_answer_format_finds_the_english_facts(embeddings: None, make_card) -> None:
    for content in (
        "Prefers answers as short bullet lists.",
        "Works in the Europe/Berlin time zone.",
        "Deploys shop-api with GitHub Actions on Fridays.",
        "用户喜欢喝乌龙茶。",
    ):
        save_card(make_card(content=content), actor="t")
    assert _contents("回答的格式")[0] == "Prefers answers as short bullet lists."


def test_a_word_in_no_fact_finds_nothing(embeddings: None, make_card) -> None:
    """The old floor (cosine 0.10) answered "pytest" with an unrelated Chinese fact."""
    for content in ("用户偏好用中文解释技术问题", "用户喜欢喝乌龙茶。", "Works in the Europe/Berlin time zone."):
        save_card(make_card(content=content), actor="t")
    assert _contents("pytest") == []


def test_the_vectors_find_the_statement_not_another_question(embeddings: None, make_card) -> None:
    """Raw conversation turns: the user's earlier questions about hiking are not what
    "where did I go hiking" is looking for (the encoder put a question next to questions:
    cosine 0.44 to "Do you know any good places…" before, against 0.39 to the answer)."""
    said = save_card(make_card(content="Last weekend I went hiking on Mount Rainier with my brother."), actor="t")
    save_card(make_card(content="Do you know any good places to go hiking near Seattle?"), actor="t")
    save_card(make_card(content="Can you recommend some hiking boots?"), actor="t")
    hits = search("Where did I go hiking?", user_id="alice", agent_name="coder", now=FIXED_NOW, mode="vectors")
    assert hits[0].id == said.id


def test_a_card_that_is_a_question_scores_as_one(embeddings: None) -> None:
    direction = embedding.question_direction()
    asked, said = embedding.embed(["Do you have any book recommendations for me?", "I read Dune last month."])
    assert float(asked @ direction) > float(said @ direction) + 0.1


def test_the_hybrid_top_k_is_the_same_at_every_limit(embeddings: None, make_card) -> None:
    for n in range(12):
        save_card(make_card(content=f"User visited museum number {n} and liked exhibition {n % 3}."), actor="t")
    save_card(make_card(content="博物馆的展览很有意思。"), actor="t")
    longest = _contents("Which museum exhibition did I like?", limit=10)
    assert len(longest) == 10
    for limit in range(1, 10):
        assert _contents("Which museum exhibition did I like?", limit=limit) == longest[:limit]


# --- a question that names a day (retrieval/dates.py) ------------------------------------


@pytest.mark.parametrize(
    ("question", "days"),
    [
        ("On May 2nd, what did I do?", [Day(5, 2)]),
        ("What did I tell you on 2 May 2023?", [Day(5, 2, 2023)]),
        ("What did I say on the 4th of May?", [Day(5, 4)]),
        ("Sept. 3 and Dec 31st", [Day(9, 3), Day(12, 31)]),
        ("On 2023-05-02 I said", [Day(5, 2, 2023)]),
        ("我5月3日去了哪里？", [Day(5, 3)]),
        ("五月二号我心情怎么样？", [Day(5, 2)]),
        ("2023年4月30日我做了什么菜", [Day(4, 30, 2023)]),
        ("十二月三十一日", [Day(12, 31)]),
        # not days: the verb, an impossible date, a band, a month alone, a relative day
        ("You may 2 things", []),
        ("April 31st", []),
        ("我最喜欢的乐队是五月天", []),
        ("What did I do in May?", []),
        ("What did I tell you yesterday?", []),
    ],
)
def test_it_reads_the_days_a_question_names(question: str, days: list[Day]) -> None:
    assert mentioned(question) == days


def _said(make_card, content: str, day: datetime) -> str:
    card = make_card(content=content, created_at=day, updated_at=day)
    save_card(card, actor="t")
    return card.id


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
def test_a_question_naming_a_day_finds_what_was_said_that_day(embeddings: None, make_card, mode: str) -> None:
    may_2 = datetime(2026, 5, 2, 9, 30, tzinfo=UTC)
    may_9 = datetime(2026, 5, 9, 9, 30, tzinfo=UTC)
    that_day = _said(make_card, "Felt tired and a bit low after a long week at work.", may_2)
    _said(make_card, "Felt great after the weekend hike.", may_9)
    _said(make_card, "My mood is usually better in the morning.", may_9)
    for question in ("What was my mood on May 2nd?", "我5月2日心情怎么样？", "How did I feel on 2 May 2026?"):
        hits = search(question, user_id="alice", agent_name="coder", limit=3, now=FIXED_NOW, mode=mode)
        assert hits[0].id == that_day, question
        assert hits[0].date == DATE_WEIGHT and all(h.date is None for h in hits[1:])
    # Another year's May 2nd is not the day asked about; no day named: no date part.
    hits = search("How did I feel on 2 May 2025?", user_id="alice", agent_name="coder", now=FIXED_NOW, mode=mode)
    assert all(h.date is None for h in hits)
    assert all(h.date is None for h in search("my mood", user_id="alice", agent_name="coder", now=FIXED_NOW))


def test_the_day_is_read_only_inside_the_scope(embeddings: None, make_card) -> None:
    may_2 = datetime(2026, 5, 2, 9, 30, tzinfo=UTC)
    _said(make_card, "Alice's plan for the day.", may_2)
    save_card(make_card(content="Bob's secret plan.", user_id="bob", created_at=may_2, updated_at=may_2), actor="t")
    hits = search("What did I do on May 2nd?", user_id="carol", agent_name="coder", now=FIXED_NOW)
    assert hits == []
