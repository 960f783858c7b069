"""Issue 36: questions find statements, the ranking does not depend on the limit, a query
about nothing the user said finds nothing, and the new-user examples of the issue."""

from __future__ import annotations

import pytest

from facts.storage.writer import save_card
from retrieval import vectors
from retrieval.query import core
from retrieval.search import search
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
    direction = vectors.question_direction()
    asked, said = vectors.embed(["Do you have any book recommendations for me?", "I read Dune last month."])
    assert float(asked @ direction) > float(said @ direction) + 0.1


def test_the_hybrid_top_k_is_the_same_at_every_limit(embeddings: None, make_card) -> None:
    for n in range(12):
        save_card(make_card(content=f"User visited museum number {n} and liked exhibition {n % 3}."), actor="t")
    save_card(make_card(content="博物馆的展览很有意思。"), actor="t")
    longest = _contents("Which museum exhibition did I like?", limit=10)
    assert len(longest) == 10
    for limit in range(1, 10):
        assert _contents("Which museum exhibition did I like?", limit=limit) == longest[:limit]
