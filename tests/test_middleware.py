"""LongTermMemoryMiddleware, the memory_search tool and the summarization flush, through
`create_agent` with a scripted model and a recording memory."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from facts.intake.filtering import INJECTED_ORIGINS, filter_messages
from memoryadmin.client import MemoryClient
from memoryadmin.langchain_memory import (
    LongTermMemoryMiddleware,
    MemoryFlushingSummarization,
    is_injected,
    make_memory_search_tool,
    memory_message,
)
from memoryadmin.memory_protocol import MemoryContext, MemoryUnavailable
from tests.test_middleware_fakes import RecordingMemory, ScriptedChatModel

ALICE = MemoryContext(user_id="alice", agent_name="coder")


def agent_with(memory: Any, model: ScriptedChatModel, *, mode: str = "auto", extra: list | None = None) -> Any:
    return create_agent(
        model,
        middleware=[LongTermMemoryMiddleware(memory, mode=mode), *(extra or [])],
        context_schema=MemoryContext,
        checkpointer=InMemorySaver(),
    )


def run(agent: Any, text: str, *, thread: str = "t1", ctx: MemoryContext = ALICE, **kwargs: Any) -> dict:
    return agent.invoke(
        {"messages": [HumanMessage(content=text, **kwargs)]},
        context=ctx,
        config={"configurable": {"thread_id": thread}},
    )


def is_memory(message: Any) -> bool:
    return (message.additional_kwargs or {}).get("origin") == "memory"


# --- wrap_model_call ---------------------------------------------------------------


def test_it_prepends_the_memory_to_the_model_request() -> None:
    memory, model = RecordingMemory(), ScriptedChatModel()
    run(agent_with(memory, model), "讲讲数据库事务。")
    prompt = model.prompts[0]
    assert is_memory(prompt[0])
    assert prompt[0].additional_kwargs == {"origin": "memory", "hide_from_ui": True}
    assert isinstance(prompt[0], HumanMessage)
    assert prompt[0].content == memory.text
    assert prompt[1].content == "讲讲数据库事务。"


def test_the_injected_memory_is_never_persisted_in_the_thread() -> None:
    memory, model = RecordingMemory(), ScriptedChatModel()
    agent = agent_with(memory, model)
    result = run(agent, "第一问")
    run(agent, "第二问")
    assert not any(is_memory(m) for m in result["messages"])
    state = agent.get_state({"configurable": {"thread_id": "t1"}}).values
    assert [m.content for m in state["messages"]] == ["第一问", "好的。", "第二问", "好的。"]
    # The second call carries exactly one memory message, not one per earlier turn.
    assert sum(is_memory(m) for m in model.prompts[1]) == 1


def test_the_injected_memory_is_never_sent_back_for_extraction() -> None:
    memory, model = RecordingMemory(), ScriptedChatModel()
    agent = agent_with(memory, model)
    run(agent, "第一问")
    run(agent, "第二问")
    for _, messages, _ in memory.turns:
        assert all(memory.text not in json.dumps(m, ensure_ascii=False) for m in messages)
        assert not any((m.get("additional_kwargs") or {}).get("origin") == "memory" for m in messages)


def test_memory_is_rendered_again_at_every_model_call() -> None:
    memory, model = RecordingMemory(), ScriptedChatModel()
    agent = agent_with(memory, model)
    run(agent, "第一问")
    memory.text = "长期记忆：用户刚纠正：先给结论。"
    run(agent, "第二问")
    assert model.prompts[1][0].content == "长期记忆：用户刚纠正：先给结论。"
    assert len(memory.context_calls) == 2


def test_it_can_inject_a_system_message_instead() -> None:
    memory, model = RecordingMemory(), ScriptedChatModel()
    agent = create_agent(
        model, middleware=[LongTermMemoryMiddleware(memory, as_system=True)], context_schema=MemoryContext
    )
    agent.invoke({"messages": [HumanMessage(content="hi there, question")]}, context=ALICE)
    assert model.prompts[0][0].type == "system"
    assert is_memory(model.prompts[0][0])


def test_it_renders_the_profile_only_in_tool_mode() -> None:
    memory, model = RecordingMemory(), ScriptedChatModel()
    run(agent_with(memory, model, mode="tool"), "讲讲数据库事务。")
    assert memory.context_calls[0][1] == "tool"
    assert model.bound_tools == ["memory_search"]


def test_an_empty_memory_adds_no_message() -> None:
    memory, model = RecordingMemory(text=""), ScriptedChatModel()
    run(agent_with(memory, model), "讲讲数据库事务。")
    assert not any(is_memory(m) for m in model.prompts[0])


def test_without_a_user_in_the_context_it_stays_out_of_the_way() -> None:
    memory, model = RecordingMemory(), ScriptedChatModel()
    agent = create_agent(model, middleware=[LongTermMemoryMiddleware(memory)])
    agent.invoke({"messages": [HumanMessage(content="问题")]})
    assert memory.context_calls == [] and memory.turns == []


# --- before_agent / after_agent ------------------------------------------------------


def test_after_agent_sends_the_user_input_and_the_final_reply() -> None:
    memory, model = RecordingMemory(), ScriptedChatModel(script=["事务是一组要么全做要么全不做的操作。"])
    run(agent_with(memory, model), "我主要做 Python 后端开发。讲讲数据库事务。", thread="t9")
    ((ctx, messages, flush),) = memory.turns
    assert ctx == MemoryContext("alice", "coder", None, "t9")
    assert flush is False
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "我主要做 Python 后端开发。讲讲数据库事务。"),
        ("assistant", "事务是一组要么全做要么全不做的操作。"),
    ]
    assert all(m["id"] for m in messages)


def test_before_agent_snapshots_only_this_runs_input() -> None:
    memory, model = RecordingMemory(), ScriptedChatModel()
    agent = agent_with(memory, model)
    run(agent, "第一问")
    run(agent, "第二问")
    second = memory.turns[1][1]
    assert [m["content"] for m in second] == ["第二问", "好的。"]


def test_tool_traffic_is_not_sent_as_the_reply() -> None:
    memory = RecordingMemory(results=[{"id": "fact_000000000001", "content": "用户偏好中文。"}])
    call = AIMessage(content="", tool_calls=[{"name": "memory_search", "args": {"query": "中文"}, "id": "c1"}])
    model = ScriptedChatModel(script=[call, "用中文回答。"])
    run(agent_with(memory, model, mode="tool"), "按我平时的表达偏好解释事务。")
    messages = memory.turns[0][1]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[-1]["content"] == "用中文回答。"


def test_a_memory_failure_never_breaks_the_turn_and_is_retried_later() -> None:
    memory, model = RecordingMemory(), ScriptedChatModel()
    agent = agent_with(memory, model)
    memory.fail = MemoryUnavailable("down")
    result = run(agent, "第一问")
    assert result["messages"][-1].content == "好的。"
    assert len(memory.outbox) == 1
    memory.fail = None
    memory.outbox.base_delay = 0
    memory.outbox._items[0].not_before = 0
    run(agent, "第二问")
    assert [m[1][0]["content"] for m in memory.turns] == ["第一问", "第二问"]
    assert len(memory.outbox) == 0


def test_an_unreachable_api_never_breaks_the_turn() -> None:
    client = MemoryClient("http://127.0.0.1:9", "mem_x", timeout=0.5)
    model = ScriptedChatModel()
    result = run(agent_with(client, model), "第一问")
    assert result["messages"][-1].content == "好的。"
    assert not any(is_memory(m) for m in model.prompts[0])
    assert len(client.outbox) == 1


# --- the tool --------------------------------------------------------------------------


def test_the_tool_schema_has_no_user_or_agent_argument() -> None:
    tool = make_memory_search_tool(RecordingMemory())
    schema = tool.tool_call_schema.model_json_schema()
    assert set(schema["properties"]) == {"query", "limit"}


def test_the_tool_never_takes_the_user_from_the_model() -> None:
    memory = RecordingMemory(results=[{"id": "fact_000000000001", "content": "用户偏好中文。"}])
    call = AIMessage(
        content="",
        tool_calls=[
            {
                "name": "memory_search",
                "args": {"query": "中文", "user_id": "mallory", "agent_name": "admin", "limit": 50},
                "id": "c1",
            }
        ],
    )
    model = ScriptedChatModel(script=[call, "完成。"])
    result = run(agent_with(memory, model, mode="tool"), "按我平时的表达偏好解释。")
    ((ctx, query, limit),) = memory.search_calls
    assert ctx.user_id == "alice" and ctx.agent_name == "coder"
    assert query == "中文"
    assert limit == 10
    tool_message = next(m for m in result["messages"] if isinstance(m, ToolMessage))
    assert json.loads(tool_message.content) == memory.results


def test_the_tool_reports_an_unavailable_memory_instead_of_raising() -> None:
    memory = RecordingMemory()
    memory.fail = MemoryUnavailable("down")
    call = AIMessage(content="", tool_calls=[{"name": "memory_search", "args": {"query": "中文"}, "id": "c1"}])
    model = ScriptedChatModel(script=[call, "完成。"])
    result = run(agent_with(memory, model, mode="tool"), "按我平时的表达偏好解释。")
    tool_message = next(m for m in result["messages"] if isinstance(m, ToolMessage))
    assert json.loads(tool_message.content)["results"] == []


def test_tool_results_are_not_sent_for_extraction() -> None:
    memory = RecordingMemory(results=[{"id": "fact_000000000001", "content": "用户偏好中文。"}])
    call = AIMessage(content="", tool_calls=[{"name": "memory_search", "args": {"query": "中文"}, "id": "c1"}])
    model = ScriptedChatModel(script=[call, "完成。"])
    run(agent_with(memory, model, mode="tool"), "按我平时的表达偏好解释。")
    assert "用户偏好中文" not in json.dumps([messages for _, messages, _ in memory.turns], ensure_ascii=False)


# --- the summarization flush ---------------------------------------------------------


def summarizing_agent(memory: RecordingMemory, model: ScriptedChatModel) -> Any:
    summary_model = ScriptedChatModel(default="摘要：用户在讨论数据库。")
    return agent_with(
        memory,
        model,
        extra=[MemoryFlushingSummarization(memory, model=summary_model, trigger=("messages", 6), keep=("messages", 2))],
    )


def test_messages_about_to_be_summarized_are_flushed_first() -> None:
    memory, model = RecordingMemory(), ScriptedChatModel()
    agent = summarizing_agent(memory, model)
    for n in range(4):
        run(agent, f"第{n}条陈述")
    flushes = [messages for _, messages, flush in memory.turns if flush]
    assert flushes, "summarization ran without flushing"
    flushed = [m["content"] for m in flushes[0]]
    assert "第0条陈述" in flushed
    state = agent.get_state({"configurable": {"thread_id": "t1"}}).values
    assert "第0条陈述" not in [m.content for m in state["messages"]]
    # The summary itself is never sent as the user's words.
    assert not any("摘要" in json.dumps(m, ensure_ascii=False) for _, ms, _ in memory.turns for m in ms)


def test_every_user_statement_reaches_memory_despite_summarization() -> None:
    memory, model = RecordingMemory(), ScriptedChatModel()
    agent = summarizing_agent(memory, model)
    for n in range(6):
        run(agent, f"第{n}条陈述")
    sent = {m["content"] for _, messages, _ in memory.turns for m in messages if m["role"] == "user"}
    assert {f"第{n}条陈述" for n in range(6)} <= sent


def test_the_snapshot_keeps_a_user_input_summarized_away_during_its_own_run() -> None:
    memory = RecordingMemory(results=[])
    calls = [
        AIMessage(content="", tool_calls=[{"name": "memory_search", "args": {"query": f"q{n}"}, "id": f"c{n}"}])
        for n in range(4)
    ]
    model = ScriptedChatModel(script=[*calls, "完成。"])
    summary_model = ScriptedChatModel(default="摘要。")
    agent = agent_with(
        memory,
        model,
        mode="tool",
        extra=[MemoryFlushingSummarization(memory, model=summary_model, trigger=("messages", 5), keep=("messages", 2))],
    )
    run(agent, "我主要做 Python 后端开发。")
    state = agent.get_state({"configurable": {"thread_id": "t1"}}).values
    assert "我主要做 Python 后端开发。" not in [m.content for m in state["messages"]]
    flushed = [m["content"] for _, messages, flush in memory.turns if flush for m in messages]
    assert "我主要做 Python 后端开发。" in flushed
    final = memory.turns[-1]
    assert final[2] is False
    assert [(m["role"], m["content"]) for m in final[1]] == [
        ("user", "我主要做 Python 后端开发。"),
        ("assistant", "完成。"),
    ]


def test_the_async_hooks_behave_like_the_sync_ones() -> None:
    import asyncio

    memory, model = RecordingMemory(), ScriptedChatModel()
    agent = summarizing_agent(memory, model)

    async def conversation() -> None:
        for n in range(4):
            await agent.ainvoke(
                {"messages": [HumanMessage(content=f"第{n}条陈述")]},
                context=ALICE,
                config={"configurable": {"thread_id": "async"}},
            )

    asyncio.run(conversation())
    assert all(is_memory(prompt[0]) for prompt in model.prompts)
    normal = [messages for _, messages, flush in memory.turns if not flush]
    assert [m[0]["content"] for m in normal] == [f"第{n}条陈述" for n in range(4)]
    assert any(flush for _, _, flush in memory.turns)
    state = agent.get_state({"configurable": {"thread_id": "async"}}).values
    assert not any(is_memory(m) for m in state["messages"])


@pytest.mark.parametrize("origin", sorted(INJECTED_ORIGINS))
def test_it_never_takes_what_the_runtime_injected_for_the_users_words(origin: str) -> None:
    """The middleware and the write side's filter agree on what was injected."""
    injected = HumanMessage(content="用户偏好用中文解释技术问题。", id="i1", additional_kwargs={"origin": origin})
    assert is_injected(injected)
    assert filter_messages([injected]) == []


def test_the_memory_block_it_injects_is_never_extracted_as_the_users_words() -> None:
    block = memory_message("<memory>用户偏好用中文解释技术问题。</memory>")
    assert is_injected(block)
    assert filter_messages([block, HumanMessage(content="请解释一下这段代码", id="u1")]) == [
        {"id": "u1", "role": "user", "content": "请解释一下这段代码"}
    ]
