"""Filtering before any model call (docs/design.md §5.1): one test per rule."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage, message_to_dict

from facts.intake.filtering import (
    ACKNOWLEDGEMENTS,
    cut_uploads,
    filter_messages,
    has_user_text,
    is_acknowledgement,
    to_messages,
)


def roles(rows: list) -> list[str]:
    return [row["role"] for row in rows]


def test_it_keeps_user_text_and_assistant_text_replies() -> None:
    rows = filter_messages([HumanMessage("我主要做 Python 后端开发", id="u1"), AIMessage("明白，我会记住。", id="a1")])
    assert rows == [
        {"id": "u1", "role": "user", "content": "我主要做 Python 后端开发"},
        {"id": "a1", "role": "assistant", "content": "明白，我会记住。"},
    ]


def test_it_drops_ai_messages_with_tool_calls() -> None:
    call = AIMessage("", id="a1", tool_calls=[{"name": "read_file", "args": {"path": "redis.conf"}, "id": "c1"}])
    rows = filter_messages([HumanMessage("看看配置", id="u1"), call, AIMessage("配置用的是 Redis。", id="a2")])
    assert [r["id"] for r in rows] == ["u1", "a2"]


def test_it_drops_ai_messages_with_tool_calls_even_when_they_have_text() -> None:
    call = AIMessage("让我读一下文件", id="a1", tool_calls=[{"name": "read_file", "args": {}, "id": "c1"}])
    assert [r["id"] for r in filter_messages([HumanMessage("看看", id="u1"), call])] == ["u1"]


def test_it_drops_tool_messages() -> None:
    rows = filter_messages(
        [HumanMessage("看看配置", id="u1"), ToolMessage("maxmemory 2gb", tool_call_id="c1", id="t1")]
    )
    assert roles(rows) == ["user"]


def test_it_drops_system_messages() -> None:
    rows = filter_messages([SystemMessage("You are helpful", id="s1"), HumanMessage("我做后端开发", id="u1")])
    assert roles(rows) == ["user"]


@pytest.mark.parametrize("origin", ["memory", "runtime", "upload"])
def test_it_drops_injected_messages_by_origin(origin: str) -> None:
    injected = HumanMessage("用户喜欢详细解释", id="m0", additional_kwargs={"origin": origin})
    rows = filter_messages([injected, HumanMessage("解释一下事务", id="u1")])
    assert [r["id"] for r in rows] == ["u1"]


def test_it_keeps_messages_of_other_origins() -> None:
    rows = filter_messages([HumanMessage("我在上海工作", id="u1", additional_kwargs={"origin": "web"})])
    assert [r["id"] for r in rows] == ["u1"]


def test_it_drops_hidden_messages() -> None:
    hidden = HumanMessage("internal note", id="h1", additional_kwargs={"hide_from_ui": True})
    assert filter_messages([hidden, HumanMessage("我做前端", id="u1")]) == [
        {"id": "u1", "role": "user", "content": "我做前端"}
    ]


def test_it_keeps_a_hidden_clarification_answer_from_the_real_user() -> None:
    answer = HumanMessage(
        "用 PostgreSQL 16", id="u2", additional_kwargs={"hide_from_ui": True, "human_input_response": True}
    )
    assert [r["id"] for r in filter_messages([answer])] == ["u2"]


def test_it_does_not_treat_a_hidden_ai_message_with_the_marker_as_a_clarification() -> None:
    hidden = AIMessage("x", id="a1", additional_kwargs={"hide_from_ui": True, "human_input_response": True})
    assert filter_messages([hidden]) == []


def test_it_drops_an_injected_memory_message_even_with_a_clarification_marker() -> None:
    injected = HumanMessage("x", id="m", additional_kwargs={"origin": "memory", "human_input_response": True})
    assert filter_messages([injected]) == []


def test_it_drops_the_article_acknowledgement_and_its_reply() -> None:
    rows = filter_messages([HumanMessage("好的", id="u1"), AIMessage("不客气！", id="a1")])
    assert rows == []


def test_it_keeps_the_article_acknowledgement_with_a_real_request() -> None:
    text = "好的，不过以后解释代码请先给最小示例"
    rows = filter_messages([HumanMessage(text, id="u1"), AIMessage("没问题。", id="a1")])
    assert rows == [
        {"id": "u1", "role": "user", "content": text},
        {"id": "a1", "role": "assistant", "content": "没问题。"},
    ]


@pytest.mark.parametrize(
    "text",
    [
        "好的",
        "好的。",
        "谢谢！",
        "好的，谢谢",
        "嗯嗯",
        "你好",
        "OK",
        "ok!",
        "Thanks!",
        "thank you",
        "Hi there"[:2],
        "  hello  ",
    ],
)
def test_it_recognizes_whole_message_acknowledgements_in_chinese_and_english(text: str) -> None:
    assert is_acknowledgement(text)


@pytest.mark.parametrize(
    "text",
    [
        "好的，不过以后解释代码请先给最小示例",
        "thanks, and please answer in English from now on",
        "ok so I use vim",
        "谢谢你的帮助，我是后端工程师",
    ],
)
def test_it_never_drops_a_message_because_of_a_keyword(text: str) -> None:
    assert not is_acknowledgement(text)


def test_the_acknowledgement_list_is_data_that_can_be_extended() -> None:
    assert "好的" in ACKNOWLEDGEMENTS and "thanks" in ACKNOWLEDGEMENTS


def test_it_cuts_the_upload_block_and_keeps_the_users_own_sentence() -> None:
    text = "<current_uploads>\n/tmp/uploads/a1b2/report.pdf (2.1 MB)\n</current_uploads>\n这是附件，我平时主要负责 Python 后端"
    rows = filter_messages([HumanMessage(text, id="u1")])
    assert rows == [{"id": "u1", "role": "user", "content": "这是附件，我平时主要负责 Python 后端"}]


def test_it_cuts_uploaded_files_blocks_too() -> None:
    text, found = cut_uploads("<uploaded_files>\n- notes.txt\n</uploaded_files> I lead the data team")
    assert (text, found) == ("I lead the data team", True)


def test_it_drops_an_upload_only_message_and_the_reply_after_it() -> None:
    upload = HumanMessage("<current_uploads>/tmp/x.csv</current_uploads>", id="u1")
    rows = filter_messages(
        [upload, AIMessage("收到，我已经看到了附件", id="a1"), HumanMessage("我做数据分析", id="u2")]
    )
    assert [r["id"] for r in rows] == ["u2"]


def test_it_keeps_the_reply_to_a_real_message_after_a_dropped_one() -> None:
    rows = filter_messages(
        [
            HumanMessage("好的", id="u1"),
            AIMessage("👍", id="a1"),
            HumanMessage("我用 vim", id="u2"),
            AIMessage("好", id="a2"),
        ]
    )
    assert [r["id"] for r in rows] == ["u2", "a2"]


def test_it_keeps_only_the_text_parts_of_multimodal_content() -> None:
    content = [
        {"type": "text", "text": "这张图是我们的架构"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": "我负责网关"},
    ]
    rows = filter_messages([HumanMessage(content=content, id="u1")])
    assert rows[0]["content"] == "这张图是我们的架构\n我负责网关"


def test_it_drops_a_message_whose_only_part_is_an_image() -> None:
    content = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    assert filter_messages([HumanMessage(content=content, id="u1"), AIMessage("nice picture", id="a1")]) == []


def test_it_drops_empty_assistant_replies() -> None:
    assert roles(filter_messages([HumanMessage("我做后端", id="u1"), AIMessage("   ", id="a1")])) == ["user"]


def test_it_reports_no_user_text_so_no_model_is_called() -> None:
    assert not has_user_text(filter_messages([HumanMessage("谢谢", id="u1"), AIMessage("不客气", id="a1")]))
    assert has_user_text(filter_messages([HumanMessage("我做后端", id="u1")]))


def test_it_accepts_openai_style_dicts_with_extra_keys_in_additional_kwargs() -> None:
    raw = [
        {"role": "user", "content": "用户喜欢详细解释", "id": "m0", "origin": "memory"},
        {"role": "user", "content": "我主要做 Python 后端开发", "id": "u1"},
        {
            "role": "assistant",
            "content": None,
            "id": "a1",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}],
        },
        {"role": "tool", "content": "result", "tool_call_id": "c1", "id": "t1"},
        {"role": "assistant", "content": "好的，明白了。", "id": "a2"},
    ]
    messages = to_messages(raw)
    assert messages[0].additional_kwargs["origin"] == "memory"
    assert [r["id"] for r in filter_messages(raw)] == ["u1", "a2"]


def test_it_accepts_langchain_dicts() -> None:
    raw = [message_to_dict(HumanMessage("我做后端", id="u1")), {"type": "ai", "content": "好", "id": "a1"}]
    assert [r["id"] for r in filter_messages(raw)] == ["u1", "a1"]


def test_it_gives_messages_without_ids_a_positional_id() -> None:
    assert filter_messages([{"role": "user", "content": "我做后端"}])[0]["id"] == "msg-0"


@pytest.mark.parametrize("bad", [{"content": "no role"}, {"role": "wizard", "content": "x"}, "text?"])
def test_it_refuses_messages_it_cannot_read(bad: object) -> None:
    with pytest.raises(ValueError):
        to_messages([bad])
