"""`manage.py demo --offline-article` prints the article's section-8 observations."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from facts.models import Candidate, ExtractionRun, FactCard, FactUsage, Turn
from memoryadmin import article_demo

pytestmark = pytest.mark.django_db


@pytest.fixture
def output() -> str:
    out = io.StringIO()
    call_command("demo", "--offline-article", stdout=out)
    return out.getvalue()


def test_it_keeps_user_and_assistant_text_and_saves_one_of_three_candidates(output: str) -> None:
    assert "过滤后角色：['user', 'assistant']；候选 3 条，保存 1 条" in output
    assert "拒绝 current_task：" in output and "scope_thread" in output
    assert "拒绝 push_permission：transactional" in output


def test_it_finds_the_chinese_preference_for_the_user_and_nothing_for_another(output: str) -> None:
    assert "检索中文偏好：['用户偏好用中文解释技术问题。']" in output
    assert "其他用户检索：[]" in output


def test_the_auto_render_shows_profile_then_correction_then_fact_within_budget(output: str) -> None:
    auto = output.split("auto 模式（", 1)[1].split("tool 模式", 1)[0]
    tokens = int(auto.split(" token", 1)[0])
    assert 0 < tokens <= 900
    lines = auto.splitlines()[1:4]
    assert lines == [
        "共享画像：用户主要从事 Python 后端开发。",
        "纠正事实：用户希望先看结论，再看必要解释。",
        "普通事实：用户偏好用中文解释技术问题。",
    ]


def test_the_tool_render_shows_the_profile_only_and_is_smaller(output: str) -> None:
    auto_tokens = int(output.split("auto 模式（", 1)[1].split(" token", 1)[0])
    tool = output.split("tool 模式（", 1)[1]
    tool_tokens = int(tool.split(" token", 1)[0])
    assert tool.splitlines()[1] == "共享画像：用户主要从事 Python 后端开发。"
    assert not tool.splitlines()[2].strip()
    assert 0 < tool_tokens < auto_tokens


def test_it_adds_a_correction_then_rereads_the_files_and_rebuilds_the_index(output: str) -> None:
    assert "添加用户级纠正：保存 1 条" in output
    assert "重新读取文件：2 张卡片、1 份画像；已从文件重建索引" in output


def test_the_result_matches_the_printed_render() -> None:
    result = article_demo.run(io.StringIO())
    assert result.auto["tokens"] <= article_demo.BUDGET
    assert len(result.auto["included"]) == 2
    assert article_demo.PREFERENCE_TEXT not in result.tool["text"]
    assert article_demo.PROFILE_TEXT in result.tool["text"]


def test_it_leaves_nothing_behind(memory_root: Path, settings: Any) -> None:
    def files() -> list[Path]:  # SQLite's own -wal/-shm come and go with its connections
        return sorted(p for p in memory_root.rglob("*") if not p.name.endswith(("-wal", "-shm")))

    before = files()  # the test's empty index
    article_demo.run(io.StringIO())
    assert memory_root == settings.MEMORY_ROOT
    assert files() == before
    for model in (FactCard, Candidate, ExtractionRun, Turn, FactUsage):
        assert not model.objects.exists(), model.__name__
