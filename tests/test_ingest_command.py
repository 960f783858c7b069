"""`manage.py ingest FILE.jsonl [--json]`: replay and model runs through the same gate."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from facts.models import FactCard
from tests.openai_stub import OpenAIStub

pytestmark = pytest.mark.django_db

ARTICLE_TURN = {
    "user_id": "alice",
    "agent_name": "coder",
    "thread_id": "t1",
    "messages": [
        {"role": "system", "content": "你是技术助手。", "id": "s1"},
        {"role": "user", "content": "用户喜欢详细解释", "id": "m0", "origin": "memory", "hide_from_ui": True},
        {
            "role": "user",
            "content": "我主要做 Python 后端开发，平时请用中文解释技术问题。这个仓库用 PostgreSQL。",
            "id": "u1",
        },
        {
            "role": "assistant",
            "content": "",
            "id": "a0",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}],
        },
        {"role": "tool", "content": "DATABASE_URL=postgres://", "tool_call_id": "c1", "id": "t0"},
        {"role": "user", "content": "好的", "id": "u0"},
        {"role": "assistant", "content": "已定位到查询漏加租户条件。", "id": "a1"},
        {"role": "user", "content": "验证后可以把这次修改提交并推送。", "id": "u2"},
    ],
    "model_output": {
        "facts": [
            {
                "key": "response_language",
                "content": "用户偏好用中文解释技术问题。",
                "category": "preference",
                "scope": "user",
                "durability": "durable",
                "authority": "descriptive",
                "confidence": 0.9,
                "evidence_message_id": "u1",
                "evidence_text": "平时请用中文解释技术问题",
            },
            {
                "key": "database",
                "content": "当前仓库使用 PostgreSQL。",
                "category": "context",
                "scope": "thread",
                "durability": "durable",
                "authority": "descriptive",
                "confidence": 0.9,
                "evidence_message_id": "u1",
                "evidence_text": "这个仓库用 PostgreSQL",
            },
            {
                "key": "push_permission",
                "content": "用户允许提交并推送。",
                "category": "context",
                "scope": "user",
                "durability": "durable",
                "authority": "transactional",
                "confidence": 0.95,
                "evidence_message_id": "u2",
                "evidence_text": "可以把这次修改提交并推送",
            },
        ]
    },
}


def write(tmp_path: Path, *lines: Any) -> Path:
    path = tmp_path / "turns.jsonl"
    path.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line, ensure_ascii=False) for line in lines)
    )
    return path


def run(path: Path, *args: str) -> tuple[list[dict[str, Any]], str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.suppress(CommandError):
        call_command("ingest", str(path), "--json", *args, stdout=out, stderr=err)
    return [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


def test_it_replays_the_articles_turn_and_prints_the_verdicts(tmp_path: Path) -> None:
    [result], _ = run(write(tmp_path, ARTICLE_TURN))
    assert result["roles"] == ["user", "user"]
    assert result["candidates"] == [
        {"kind": "fact", "key": "response_language", "verdict": "accepted", "reasons": []},
        {"kind": "fact", "key": "database", "verdict": "rejected", "reasons": ["scope_thread"]},
        {"kind": "fact", "key": "push_permission", "verdict": "rejected", "reasons": ["transactional"]},
    ]
    assert result["saved"] == 1 and isinstance(result["run_id"], int)
    assert FactCard.objects.get().content == "用户偏好用中文解释技术问题。"


def test_it_reports_a_bad_line_with_its_number_and_runs_the_others(tmp_path: Path) -> None:
    other = ARTICLE_TURN | {"user_id": "bob"}
    results, err = run(write(tmp_path, ARTICLE_TURN, "{not json", {"user_id": "x"}, other))
    assert [r.get("line") for r in results] == [None, 2, 3, None]
    assert "line 2:" in err and "line 3:" in err and "thread_id" in err
    assert FactCard.objects.count() == 2


def test_it_fails_the_command_when_a_line_failed(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="1 of 1"):
        call_command("ingest", str(write(tmp_path, "[]")), stdout=io.StringIO(), stderr=io.StringIO())


def test_replaying_the_same_file_twice_changes_nothing(tmp_path: Path) -> None:
    path = write(tmp_path, ARTICLE_TURN)
    run(path)
    before = list(FactCard.objects.values_list("id", "revision", "file_sha256"))
    [again], _ = run(path)
    assert again["candidates"] == [] and again["roles"] == []
    assert list(FactCard.objects.values_list("id", "revision", "file_sha256")) == before


def test_without_model_output_it_calls_the_configured_model(tmp_path: Path, openai_stub: OpenAIStub) -> None:
    openai_stub.reply_tool_call(ARTICLE_TURN["model_output"])  # type: ignore[arg-type]
    turn = {k: v for k, v in ARTICLE_TURN.items() if k != "model_output"}
    [result], _ = run(write(tmp_path, turn))
    assert len(openai_stub.requests) == 1 and result["saved"] == 1


def test_a_model_failure_is_a_bad_line(tmp_path: Path, openai_stub: OpenAIStub) -> None:
    openai_stub.reply_error(500)
    turn = {k: v for k, v in ARTICLE_TURN.items() if k != "model_output"}
    [result], err = run(write(tmp_path, turn))
    assert result["line"] == 1 and "HTTP 500" in err


def test_it_prints_a_readable_summary_without_json(tmp_path: Path) -> None:
    out = io.StringIO()
    call_command("ingest", str(write(tmp_path, ARTICLE_TURN)), stdout=out)
    assert "3 candidate(s), 1 accepted, 1 saved" in out.getvalue()
