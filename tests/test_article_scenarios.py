"""The article's section-9 questions, end to end through `create_agent`.

A scripted chat model plays the agent; the real middleware, the real store and index
and the real write pipeline run, the pipeline fed by a replayed extractor (candidates
derived from the user's actual words, evidence included).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from facts.models import Candidate, ExtractedMessage, ExtractionRun, FactCard
from memoryadmin.client import LocalMemory
from memoryadmin.langchain_memory import LongTermMemoryMiddleware, MemoryFlushingSummarization
from memoryadmin.memory_protocol import MemoryContext
from tests.factories import fact_candidate
from tests.test_middleware_fakes import ReplayExtractor, ScriptedChatModel

# transaction=True: LangGraph runs the middleware's hooks on worker threads, whose own
# database connections commit outside a test's transaction (on PostgreSQL the injection
# log and usage rows they wrote outlived the test); a transactional test empties the
# tables after itself.
pytestmark = pytest.mark.django_db(transaction=True)

RULES: list[tuple[str, list[dict], list[dict]]] = [
    (
        "我主要做 Python 后端开发",
        [fact_candidate("primary_stack", "用户主要从事 Python 后端开发。", category="context")],
        [
            {
                "section": "workContext",
                "summary": "用户主要从事 Python 后端开发。",
                "scope": "user",
                "authority": "descriptive",
            }
        ],
    ),
    ("平时请用中文解释技术问题", [fact_candidate("response_language", "用户偏好用中文解释技术问题。")], []),
    (
        "这个仓库使用 PostgreSQL",
        [fact_candidate("database", "当前仓库使用 PostgreSQL。", category="context", scope="project")],
        [],
    ),
    (
        "这次请用英文回答",
        [fact_candidate("response_language", "用户要求本次用英文回答。", scope="thread", durability="temporary")],
        [],
    ),
    (
        "以后都用英文解释技术问题，不要再用中文",
        [fact_candidate("response_language", "用户偏好用英文解释技术问题。", category="correction", confidence=0.95)],
        [],
    ),
    (
        "验证后可以直接推送",
        [fact_candidate("push_permission", "用户允许验证后直接推送。", authority="transactional")],
        [],
    ),
]


@pytest.fixture
def extractor(settings: Any, monkeypatch: pytest.MonkeyPatch) -> ReplayExtractor:
    settings.MEMORY_DEBOUNCE_SECONDS = 0
    settings.API_USAGE_FLUSH_SECONDS = 0
    settings.MEMORY_REVIEW_MODE = "auto"
    settings.MEMORY_EXTRACTOR = "llm"  # the replayed model stands in for the LLM (no MEMORY_LLM_BASE_URL here)
    replay = ReplayExtractor(rules=list(RULES))
    monkeypatch.setattr("facts.judging.extraction.build_model", lambda **_: replay)
    return replay


class Harness:
    def __init__(self, mode: str = "auto", summarize: bool = False) -> None:
        self.memory = LocalMemory()
        self.model = ScriptedChatModel()
        middleware: list[Any] = [LongTermMemoryMiddleware(self.memory, mode=mode)]
        if summarize:
            middleware.append(
                MemoryFlushingSummarization(
                    self.memory,
                    model=ScriptedChatModel(default="摘要：用户陈述了若干偏好。"),
                    trigger=("messages", 6),
                    keep=("messages", 2),
                )
            )
        self.agent = create_agent(
            self.model, middleware=middleware, context_schema=MemoryContext, checkpointer=InMemorySaver()
        )

    def say(self, text: str, *, thread: str, user: str = "alice", project: str | None = None) -> dict:
        ctx = MemoryContext(user_id=user, agent_name="coder", project_id=project)
        return self.agent.invoke(
            {"messages": [HumanMessage(content=text)]}, context=ctx, config={"configurable": {"thread_id": thread}}
        )

    def injected(self) -> str:
        """The memory message of the latest model call ("" when there was none)."""
        first = self.model.prompts[-1][0]
        if (first.additional_kwargs or {}).get("origin") != "memory":
            return ""
        return str(first.content)


def active(key: str, **bucket: Any) -> list[FactCard]:
    return list(FactCard.objects.filter(key=key, status="active", **bucket))


def test_switching_project_does_not_bring_the_old_repositorys_constraints(extractor: ReplayExtractor) -> None:
    h = Harness()
    h.say("我主要做 Python 后端开发。这个仓库使用 PostgreSQL。", thread="a1", project="repo-a")
    assert [c.project_id for c in active("database")] == ["repo-a"]

    h.say("帮我看看这个新仓库的迁移脚本。", thread="b1", project="repo-b")
    assert "PostgreSQL" not in h.injected()
    assert "Python 后端开发" in h.injected()  # user-level knowledge still comes along

    h.say("没有项目时也讲讲数据库索引。", thread="c1")
    assert "PostgreSQL" not in h.injected()

    h.say("回到原来的仓库。", thread="a2", project="repo-a")
    assert "PostgreSQL" in h.injected()


def test_answering_in_english_once_keeps_the_durable_chinese_preference(extractor: ReplayExtractor) -> None:
    h = Harness()
    h.say("平时请用中文解释技术问题。", thread="t1")
    (chinese,) = active("response_language", user_id="alice")
    h.say("这次请用英文回答：什么是事务？", thread="t2")
    rejected = Candidate.objects.get(key="response_language", content="用户要求本次用英文回答。")
    assert rejected.verdict == "rejected"
    assert set(rejected.reasons) >= {"scope_thread", "temporary"}
    assert [c.id for c in active("response_language", user_id="alice")] == [chinese.id]
    h.say("讲讲数据库锁。", thread="t3")
    assert "用户偏好用中文解释技术问题" in h.injected()
    assert "英文" not in h.injected()


def test_an_explicit_correction_of_a_long_term_habit_replaces_the_old_fact(extractor: ReplayExtractor) -> None:
    h = Harness()
    h.say("平时请用中文解释技术问题。", thread="t1")
    (old,) = active("response_language", user_id="alice")
    h.say("更正一下：以后都用英文解释技术问题，不要再用中文。", thread="t2")
    (new,) = active("response_language", user_id="alice")
    assert new.id != old.id and new.content == "用户偏好用英文解释技术问题。"
    old.refresh_from_db()
    assert old.status == "superseded" and old.superseded_by == new.id
    h.say("讲讲数据库锁。", thread="t3")
    assert "用户偏好用英文解释技术问题" in h.injected()
    assert "用户偏好用中文解释技术问题" not in h.injected()


def test_an_authorization_never_becomes_memory(extractor: ReplayExtractor) -> None:
    h = Harness()
    h.say("我主要做 Python 后端开发。修好这个 bug，验证后可以直接推送。", thread="t1")
    assert not active("push_permission")
    assert Candidate.objects.get(key="push_permission").reasons == ["transactional"]
    h.say("下一个任务。", thread="t2")
    assert "Python 后端开发" in h.injected()
    assert "推送" not in h.injected()


@pytest.mark.parametrize("mode", ["auto", "tool"])
def test_reading_memory_never_raises_a_confidence(extractor: ReplayExtractor, mode: str) -> None:
    h = Harness(mode=mode)
    h.say("我主要做 Python 后端开发，平时请用中文解释技术问题。", thread="t1")
    before = {c.id: (c.confidence, c.confirmation_count, c.updated_at, c.revision) for c in FactCard.objects.all()}
    assert before
    for n in range(4):
        if mode == "tool":
            call = {"name": "memory_search", "args": {"query": "中文"}, "id": f"s{n}"}
            h.model.script += [AIMessage(content="", tool_calls=[call]), "好的，用中文解释。"]
        h.say(f"第{n}个问题：讲讲数据库事务。", thread=f"r{n}")
    after = {c.id: (c.confidence, c.confirmation_count, c.updated_at, c.revision) for c in FactCard.objects.all()}
    assert after == before
    # The injected memory and the tool's results never reached the extractor as the user's words.
    shown = [row["content"] for rows in extractor.conversations for row in rows]
    assert not any("用户偏好用中文解释技术问题" in text for text in shown)


def test_the_injected_context_stays_within_budget_as_facts_keep_growing(
    extractor: ReplayExtractor, make_card: Any
) -> None:
    from facts.storage.writer import Put, commit
    from retrieval.models import AgentSettings
    from retrieval.tokens import count_tokens

    AgentSettings.objects.create(agent_name="coder", budget=400, correction_budget=120, top_n=50)
    h = Harness()
    sizes = []
    for batch in range(5):
        cards = [
            make_card(
                content=f"用户的第{batch}-{n}条长期偏好：解释代码时先给最小可运行示例，再讲原理和边界情况。",
                category="correction" if n % 4 == 0 else "preference",
                confidence=0.5 + (n % 10) / 20,
            )
            for n in range(40)
        ]
        commit([Put(card) for card in cards], actor="test")
        h.say(f"第{batch}轮问题。", thread=f"g{batch}")
        text = h.injected()
        sizes.append(count_tokens(text))
        assert count_tokens(text) <= 400
    assert FactCard.objects.filter(status="active").count() >= 200
    assert max(sizes) > 200  # the budget is used, not left empty


def test_summarization_mid_thread_loses_no_user_statement_and_extracts_nothing_twice(
    extractor: ReplayExtractor,
) -> None:
    statements = {
        "我主要做 Python 后端开发": "primary_stack",
        "平时请用中文解释技术问题": "response_language",
    }
    extractor.rules += [
        (f"第{n}条习惯", [fact_candidate(f"habit_{n}", f"用户的第{n}条习惯是先写测试。")], []) for n in range(6)
    ]
    h = Harness(summarize=True)
    h.say("我主要做 Python 后端开发。", thread="long")
    h.say("平时请用中文解释技术问题。", thread="long")
    for n in range(6):
        h.say(f"记住我的第{n}条习惯：先写测试。", thread="long")
    state = h.agent.get_state({"configurable": {"thread_id": "long"}}).values
    assert any((m.additional_kwargs or {}).get("lc_source") == "summarization" for m in state["messages"])

    for key in [*statements.values(), *(f"habit_{n}" for n in range(6))]:
        assert len(active(key, user_id="alice")) == 1, key
    # Every message id was fed to the extractor once, and produced its candidates once.
    fed = Counter(row["id"] for rows in extractor.conversations for row in rows)
    assert fed and max(fed.values()) == 1
    assert Counter(Candidate.objects.filter(kind="fact").values_list("key", flat=True)).most_common(1)[0][1] == 1
    ids = list(ExtractedMessage.objects.filter(thread_id="long").values_list("message_id", flat=True))
    assert len(ids) == len(set(ids))
    assert ExtractionRun.objects.filter(thread_id="long", status="failed").count() == 0


def test_a_statement_summarized_away_within_its_own_run_is_extracted_once(extractor: ReplayExtractor) -> None:
    h = Harness(mode="tool", summarize=True)
    calls = [
        AIMessage(content="", tool_calls=[{"name": "memory_search", "args": {"query": f"q{n}"}, "id": f"c{n}"}])
        for n in range(4)
    ]
    h.model.script += [*calls, "好的，以后用中文解释。"]
    h.say("平时请用中文解释技术问题。顺便查查我以前的偏好。", thread="mid")
    state = h.agent.get_state({"configurable": {"thread_id": "mid"}}).values
    assert "平时请用中文解释技术问题" not in " ".join(str(m.content) for m in state["messages"])
    assert len(active("response_language", user_id="alice")) == 1
    assert Candidate.objects.filter(key="response_language").count() == 1
    fed = Counter(row["id"] for rows in extractor.conversations for row in rows)
    assert max(fed.values()) == 1
