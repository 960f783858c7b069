"""`manage.py memory_search` and `manage.py render_context`."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from facts.storage.writer import save_card
from retrieval.search import memory_search_json
from retrieval.tokens import count_tokens

pytestmark = pytest.mark.django_db


def _run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_memory_search_prints_ranked_hits_with_their_score_breakdown(make_card) -> None:
    card = save_card(make_card(content="用户偏好用中文解释技术问题"), actor="t")
    out, _ = _run("memory_search", "--user", "alice", "--agent", "coder", "中文")
    assert card.id in out and "bm25" in out and "decay" in out


def test_memory_search_json_is_the_tools_answer(make_card) -> None:
    card = save_card(make_card(content="User prefers pytest"), actor="t")
    save_card(make_card(content="User prefers pytest", user_id="bob"), actor="t")
    out, _ = _run("memory_search", "--user", "alice", "--agent", "coder", "--json", "--limit", "3", "pytest")
    items = json.loads(out)
    assert [i["id"] for i in items] == [card.id]
    # The tool's answer, plus each score's breakdown (issue 19; the tool itself has none).
    assert set(items[0]) == {"id", "content", "category", "confidence", "score", "explain"}
    # Embeddings off in tests: the lexical part alone (issue 36: one ranking path).
    assert items[0]["explain"]["lexical_rank"] == 1 and items[0]["explain"]["vector"] is None
    assert items[0]["explain"]["bm25"] is not None


def test_memory_search_with_nothing_found_says_so(make_card) -> None:
    out, _ = _run("memory_search", "--user", "nobody", "--agent", "coder", 'NEAR("x"', "*")
    assert out.strip() == "no matching facts"


def test_render_context_json_has_text_tokens_included_and_excluded(make_card) -> None:
    kept = save_card(make_card(content="User prefers short answers", confidence=0.9), actor="t")
    cut = save_card(make_card(content="User prefers long answers", confidence=0.8), actor="t")
    out, _ = _run("render_context", "--user", "alice", "--agent", "coder", "--top-n", "1", "--json")
    data = json.loads(out)
    assert set(data) == {"text", "tokens", "included", "excluded"}
    assert data["included"] == [kept.id]
    assert data["excluded"] == [{"id": cut.id, "reason": "top_n"}]
    assert "short answers" in data["text"]


def test_render_context_prints_the_block_and_its_accounting(make_card) -> None:
    save_card(make_card(content="User prefers tabs"), actor="t")
    out, err = _run("render_context", "--user", "alice", "--agent", "coder", "--budget", "500", "--mode", "auto")
    assert out.startswith("<memory>") and "User prefers tabs" in out
    assert "budget 500" in err


def test_render_context_tool_mode_leaves_facts_out(make_card) -> None:
    save_card(make_card(content="User prefers tabs"), actor="t")
    out, _ = _run("render_context", "--user", "alice", "--agent", "coder", "--mode", "tool", "--json")
    assert "tabs" not in json.loads(out)["text"]


def test_memory_search_json_returns_every_result_the_tool_returns_with_the_breakdown_outside_the_cap(
    make_card,
) -> None:
    # Ten results of ~60 tokens fit the tool's 900-token cap; with each breakdown (~50
    # tokens) inside the cap the command used to answer with only six of them.
    for i in range(10):
        save_card(make_card(content=f"User note {i} about caching: the cache key includes the tenant " * 2), actor="t")
    tool = json.loads(memory_search_json("caching", user_id="alice", agent_name="coder", limit=10))
    assert len(tool) == 10
    out, _ = _run("memory_search", "--user", "alice", "--agent", "coder", "--json", "--limit", "10", "caching")
    items = json.loads(out)
    assert [{k: v for k, v in item.items() if k != "explain"} for item in items] == tool
    assert all(item["explain"]["bm25"] is not None for item in items)
    assert count_tokens(out) > 900  # the breakdown is outside the cap; the tool's answer is within it
