"""Ranked search (article §7, issue 36): normalized BM25 in scope, fixed candidate depths,
decay as a weighted order, confidence as a tie-breaker."""

from __future__ import annotations

import json
import math
from datetime import timedelta

import pytest

from facts.enums import CardStatus
from facts.storage.writer import save_card
from memoryadmin.client import LocalMemory
from memoryadmin.memory_protocol import MemoryContext
from retrieval import search as S
from retrieval.limits import clamp_limit
from retrieval.search import decay_for, final_score, memory_search_json, search
from retrieval.tokens import count_tokens
from tests.conftest import FIXED_NOW

pytestmark = pytest.mark.django_db


def _ids(query: str, limit: int = 5, **scope) -> list[str]:
    scope = {"user_id": "alice", "agent_name": "coder", **scope}
    return [hit.id for hit in search(query, limit=limit, now=FIXED_NOW, **scope)]


def test_the_article_example_query_finds_the_chinese_fact(make_card) -> None:
    card = save_card(make_card(content="用户偏好用中文解释技术问题"), actor="t")
    save_card(make_card(content="User prefers short answers"), actor="t")
    assert _ids("中文") == [card.id]


def test_another_users_search_returns_nothing(make_card) -> None:
    save_card(make_card(content="用户偏好用中文解释技术问题"), actor="t")
    assert _ids("中文", user_id="bob") == []


@pytest.mark.parametrize(
    ("mine", "theirs"),
    [
        ({"user_id": "alice"}, {"user_id": "bob"}),
        ({"agent_name": "coder"}, {"agent_name": "writer"}),
    ],
)
def test_the_same_content_in_two_scopes_is_only_found_in_its_own(make_card, mine, theirs) -> None:
    a = save_card(make_card(content="User prefers Rust for CLI tools", **mine), actor="t")
    b = save_card(make_card(content="User prefers Rust for CLI tools", **theirs), actor="t")
    assert _ids("rust", **mine) == [a.id]
    assert _ids("rust", **theirs) == [b.id]


def test_project_facts_are_found_only_with_the_same_project(make_card) -> None:
    project = {"user_id": None, "agent_name": None}
    p1 = save_card(make_card(content="Deploys go through ArgoCD", project_id="p1", **project), actor="t")
    p2 = save_card(make_card(content="Deploys go through ArgoCD", project_id="p2", **project), actor="t")
    own = save_card(make_card(content="User deploys on Fridays"), actor="t")
    assert _ids("deploys argocd") == [own.id]
    assert set(_ids("deploys argocd", project_id="p1")) == {p1.id, own.id}
    assert _ids("argocd", project_id="p2") == [p2.id]


def test_a_better_match_ranks_higher(make_card) -> None:
    # Filler cards so the terms are rare enough for BM25 to tell them apart.
    for i in range(8):
        save_card(make_card(content=f"Unrelated note number {i} about gardening"), actor="t")
    weak = save_card(make_card(content="User likes Python"), actor="t")
    strong = save_card(make_card(content="User likes Python type hints and Python dataclasses"), actor="t")
    hits = search("python dataclasses", user_id="alice", agent_name="coder", now=FIXED_NOW)
    assert [h.id for h in hits] == [strong.id, weak.id]
    assert hits[0].bm25 < hits[1].bm25 < 0, "SQLite's bm25 is lower-is-better"
    assert hits[0].score > hits[1].score


@pytest.mark.parametrize(
    ("days", "expected"),
    [(0, 1.0), (29, 1.0), (30, 1.0), (31, math.exp(-0.01)), (100, math.exp(-0.7))],
)
def test_decay_has_a_30_day_grace_then_falls_exponentially(days: int, expected: float) -> None:
    assert decay_for(days) == pytest.approx(expected)
    score, decay, part = final_score(-2.0, 0.5, FIXED_NOW - timedelta(days=days), FIXED_NOW)
    assert decay == pytest.approx(expected)
    assert part == pytest.approx(0.1)
    assert score == pytest.approx(2.0 * expected + 0.1)


def test_age_counts_whole_days_and_never_goes_negative() -> None:
    assert S.age_days(FIXED_NOW - timedelta(days=30, hours=23), FIXED_NOW) == 30
    assert S.age_days(FIXED_NOW + timedelta(days=3), FIXED_NOW) == 0


def test_search_orders_by_relevance_times_a_weighted_decay(make_card) -> None:
    old = save_card(make_card(content="User uses Kotlin", created_at=FIXED_NOW - timedelta(days=100)), actor="t")
    hit = search("kotlin", user_id="alice", agent_name="coder", now=FIXED_NOW)[0]
    assert hit.id == old.id
    assert hit.decay == pytest.approx(1 - 0.1 * (1 - math.exp(-0.7)))
    assert hit.fused == pytest.approx(hit.lexical), "embeddings off: the relevance is the lexical part"
    assert hit.score == pytest.approx(hit.fused * hit.decay + S.CONFIDENCE_WEIGHT * hit.confidence)


def test_the_articles_decay_is_the_weight_one_setting(make_card, settings) -> None:
    settings.MEMORY_SEARCH_DECAY_WEIGHT = 1.0
    save_card(make_card(content="User uses Kotlin", created_at=FIXED_NOW - timedelta(days=100)), actor="t")
    hit = search("kotlin", user_id="alice", agent_name="coder", now=FIXED_NOW)[0]
    assert hit.decay == pytest.approx(math.exp(-0.7))


def test_an_old_fact_that_answers_still_ranks_first(make_card, settings) -> None:
    old = save_card(
        make_card(content="User deploys shop-api to Kubernetes", created_at=FIXED_NOW - timedelta(days=400)),
        actor="t",
    )
    fresh = save_card(make_card(content="User likes a tidy Kubernetes dashboard"), actor="t")
    assert _ids("deploys shop-api kubernetes")[:2] == [old.id, fresh.id]
    settings.MEMORY_SEARCH_DECAY_WEIGHT = 1.0  # the article's formula: age decides
    assert _ids("deploys shop-api kubernetes")[:2] == [fresh.id, old.id]


def test_among_equally_relevant_facts_the_newer_ranks_first(make_card) -> None:
    old = save_card(make_card(content="User drinks oolong tea", created_at=FIXED_NOW - timedelta(days=200)), actor="t")
    new = save_card(make_card(content="User drinks oolong tea", created_at=FIXED_NOW - timedelta(days=40)), actor="t")
    assert _ids("oolong tea") == [new.id, old.id]


def test_confidence_breaks_ties(make_card) -> None:
    low = save_card(make_card(content="User writes Go services", confidence=0.7), actor="t")
    high = save_card(make_card(content="User writes Go services", confidence=0.95), actor="t")
    hits = search("go services", user_id="alice", agent_name="coder", now=FIXED_NOW)
    assert [h.id for h in hits] == [high.id, low.id]
    assert hits[0].bm25 == pytest.approx(hits[1].bm25)


def test_the_top_k_is_the_same_whatever_the_limit(make_card) -> None:
    """Issue 36: the top k of a longer answer is the answer at k (the old window of
    2 × limit BM25 candidates put a different fact first at limit 1 than at limit 2)."""
    for i in range(6):
        save_card(make_card(content=f"Filler line {i} on cooking"), actor="t")
    ancient = FIXED_NOW - timedelta(days=800)
    for _ in range(2):
        save_card(make_card(content="zebra zebra zebra", created_at=ancient, confidence=0.5), actor="t")
    save_card(make_card(content="zebra and many other words here too", confidence=1.0), actor="t")
    longest = _ids("zebra", limit=10)
    assert len(longest) == 3
    for limit in (1, 2, 3):
        assert _ids("zebra", limit=limit) == longest[:limit]


def test_superseded_and_expired_cards_are_never_found(make_card) -> None:
    card = save_card(make_card(content="User prefers tea"), actor="t")
    save_card(card.model_copy(update={"status": CardStatus.SUPERSEDED}), actor="t")
    other = save_card(make_card(content="User prefers tea with milk"), actor="t")
    save_card(other.model_copy(update={"status": CardStatus.EXPIRED}), actor="t")
    assert _ids("tea") == []


INJECTIONS = [
    "",
    "   ",
    '"',
    "'",
    "*",
    "(",
    ")",
    "NEAR(",
    "NEAR(secret words, 3)",
    "secret OR 1=1",
    "secret AND NOT x",
    "secret*",
    "^secret",
    "user_id:bob",
    "scope : secret",
    'terms : ("secret")',
    "{scope terms}: secret",
    "'; DROP TABLE cards; --",
    '"secret" OR "bob"',
    "\x00secret",
    '中文")',
    "x" * 5000,
]


@pytest.mark.parametrize("query", INJECTIONS)
def test_fts_syntax_and_injection_strings_are_plain_text(make_card, query: str) -> None:
    save_card(make_card(content="The secret words are here", user_id="bob"), actor="t")
    mine = save_card(make_card(content="User keeps secret notes"), actor="t")
    ids = _ids(query)
    assert set(ids) <= {mine.id}, "never another user's facts, never an SQL error"
    assert json.loads(memory_search_json(query, user_id="alice", agent_name="coder")) is not None


def test_a_card_containing_fts_syntax_is_found_by_its_words(make_card) -> None:
    card = save_card(make_card(content='Use NEAR("a" b) * OR (x) in queries'), actor="t")
    assert _ids('NEAR("a" b)') == [card.id]


def test_stop_words_alone_do_not_cross_scopes(make_card) -> None:
    save_card(make_card(content="the user of the system", user_id="bob"), actor="t")
    mine = save_card(make_card(content="the user likes the sea"), actor="t")
    assert _ids("the user") == [mine.id]


def test_memory_search_json_has_the_tool_fields_and_clamps_the_limit(make_card) -> None:
    for i in range(14):
        save_card(make_card(content=f"User note {i} about testing"), actor="t")
    items = json.loads(memory_search_json("testing", user_id="alice", agent_name="coder", limit=50))
    assert len(items) == 10
    assert set(items[0]) == {"id", "content", "category", "confidence", "score"}
    assert len(json.loads(memory_search_json("testing", user_id="alice", agent_name="coder", limit=0))) == 1
    assert len(json.loads(memory_search_json("testing", user_id="alice", agent_name="coder", limit="x"))) == 5  # type: ignore[arg-type]


@pytest.mark.parametrize(("asked", "given"), [(0, 1), (-3, 1), (1, 1), (7, 7), (10, 10), (11, 10), (10**30, 10),
                                             ("4", 4), ("lots", 5), (None, 5), (math.inf, 5)])  # fmt: skip
def test_it_holds_an_agents_search_limit_to_one_through_ten(asked: object, given: int) -> None:
    assert clamp_limit(asked) == given


def test_the_in_process_memory_holds_the_same_limit_as_the_tool(make_card) -> None:
    for i in range(14):
        save_card(make_card(content=f"User note {i} about testing"), actor="t")
    memory = LocalMemory()
    alice = MemoryContext(user_id="alice", agent_name="coder")
    assert len(memory.search(alice, "testing", limit=50)) == 10
    assert len(memory.search(alice, "testing", limit=0)) == 1


def test_memory_search_json_drops_results_from_the_end_to_fit_the_token_cap(make_card, settings) -> None:
    for i in range(10):
        save_card(make_card(content=f"User note {i} about caching " + "with a long explanation " * 6), actor="t")
    full = json.loads(memory_search_json("caching", user_id="alice", agent_name="coder", limit=10))
    settings.MEMORY_SEARCH_TOKEN_CAP = 200
    text = memory_search_json("caching", user_id="alice", agent_name="coder", limit=10)
    trimmed = json.loads(text)
    assert 0 < len(trimmed) < len(full)
    assert count_tokens(text) <= 200
    assert [i["id"] for i in trimmed] == [i["id"] for i in full[: len(trimmed)]]


def test_the_default_cap_is_900_tokens(make_card) -> None:
    for i in range(10):
        save_card(make_card(content=f"用户第{i}条关于缓存的笔记" + "很长的解释" * 60), actor="t")
    text = memory_search_json("缓存", user_id="alice", agent_name="coder", limit=10)
    assert count_tokens(text) <= 900
