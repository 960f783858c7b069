"""The article's offline demo (section 8), reproduced on this system.

    python manage.py demo --offline-article

A turn with a user statement, a tool call and its result, an old memory injection and a
greeting goes through the real pipeline with preset structured candidates (replayed,
no model call): one user preference, one thread-scoped note, one authorization — only
the first is saved. A user-level correction follows; then the files are re-read and
the index rebuilt from them, and the memory is read back the way an agent reads it
(`LocalMemory`: search, auto-mode and tool-mode context) under the article's example
budgets (900 tokens, 250 for corrections, 8 facts).

Nothing is left behind: the memory files live in a temporary MEMORY_ROOT that is
deleted at the end, and every database row the demo writes (turns, runs, candidates,
the mirror, revisions, agent settings, usage counters) is written inside one
transaction that is rolled back. While it runs (about a second) other writers to the
same SQLite database wait for it.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.test import override_settings

from facts.judging.pipeline import run_turns_now
from facts.storage import snapshots
from facts.storage.store import get_store
from memoryadmin.client import LocalMemory
from memoryadmin.memory_protocol import MemoryContext
from retrieval import indexbuild, indexconn
from retrieval.models import AgentSettings

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

USER = "article-user"
OTHER_USER = "article-other-user"
AGENT = "article-demo"
BUDGET, CORRECTION_BUDGET, TOP_N = 900, 250, 8

PROFILE_TEXT = "用户主要从事 Python 后端开发。"
PREFERENCE_TEXT = "用户偏好用中文解释技术问题。"
CORRECTION_TEXT = "用户希望先看结论，再看必要解释。"

USER_SAYS = (
    "我主要做 Python 后端开发，平时请用中文解释技术问题。这次先帮我看看订单接口为什么漏了租户条件，验证后可以直接推送。"
)
CORRECTION_SAYS = "以后请先给结论，再补充必要解释。"

FIRST_TURN: list[dict[str, Any]] = [
    {"id": "u1", "role": "user", "content": USER_SAYS},
    {
        "id": "a1",
        "role": "assistant",
        "content": "",
        "tool_calls": [{"name": "read_file", "args": {"path": "orders/api.py"}, "id": "call-1", "type": "tool_call"}],
    },
    {"id": "t1", "role": "tool", "tool_call_id": "call-1", "content": "def list_orders(db): return db.query(Order)"},
    {
        "id": "mem-old",
        "role": "user",
        "content": "长期记忆：用户喜欢详细解释。",
        "additional_kwargs": {"origin": "memory", "hide_from_ui": True},
    },
    {"id": "a2", "role": "assistant", "content": "查询漏了 tenant_id 条件，已补上；之后我会用中文解释技术问题。"},
    {"id": "u2", "role": "user", "content": "好的，谢谢！"},
    {"id": "a3", "role": "assistant", "content": "不客气。"},
]


def _fact(key: str, content: str, category: str, evidence: str, message_id: str = "u1", **labels: Any) -> dict:
    return {
        "key": key,
        "content": content,
        "category": category,
        "scope": labels.get("scope", "user"),
        "durability": labels.get("durability", "durable"),
        "authority": labels.get("authority", "descriptive"),
        "confidence": labels.get("confidence", 0.9),
        "evidence_message_id": message_id,
        "evidence_text": evidence,
    }


FIRST_UPDATE: dict[str, Any] = {
    "facts": [
        _fact("response_language", PREFERENCE_TEXT, "preference", "平时请用中文解释技术问题"),
        _fact(
            "current_task",
            "用户正在排查订单接口漏加租户条件的问题。",
            "context",
            "这次先帮我看看订单接口为什么漏了租户条件",
            scope="thread",
            durability="temporary",
            confidence=0.85,
        ),
        _fact(
            "push_permission",
            "用户允许验证后直接推送修改。",
            "preference",
            "验证后可以直接推送",
            authority="transactional",
            confidence=0.95,
        ),
    ],
    "summaries": [
        {
            "section": "workContext",
            "summary": PROFILE_TEXT,
            "scope": "user",
            "authority": "descriptive",
            "evidence_message_id": "u1",
            "evidence_text": "我主要做 Python 后端开发",
        }
    ],
}

CORRECTION_TURN: list[dict[str, Any]] = [
    {"id": "u3", "role": "user", "content": CORRECTION_SAYS},
    {"id": "a4", "role": "assistant", "content": "明白，之后先给结论。"},
]
CORRECTION_UPDATE: dict[str, Any] = {
    "facts": [
        _fact(
            "answer_structure",
            CORRECTION_TEXT,
            "correction",
            "以后请先给结论，再补充必要解释",
            message_id="u3",
            confidence=0.95,
        )
    ]
}


@dataclass
class DemoResult:
    roles: list[str] = field(default_factory=list)
    candidates: int = 0
    saved: int = 0
    rejected: dict[str, list[str]] = field(default_factory=dict)
    correction_saved: int = 0
    reread_cards: int = 0
    search: list[str] = field(default_factory=list)
    other_search: list[str] = field(default_factory=list)
    auto: dict[str, Any] = field(default_factory=dict)
    tool: dict[str, Any] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


class _Rollback(Exception):
    pass


def run(stdout: SupportsWrite[str]) -> DemoResult:
    result = DemoResult()
    with (
        tempfile.TemporaryDirectory(prefix="article-demo-") as tmp,
        override_settings(MEMORY_ROOT=Path(tmp), API_USAGE_FLUSH_SECONDS=0, MEMORY_REVIEW_MODE="auto"),
    ):
        indexconn.connection()  # the empty store's empty index: the writes below go to it
        try:
            with transaction.atomic():
                _scenario(result)
                raise _Rollback
        except _Rollback:
            pass
    for line in result.lines:
        stdout.write(line + "\n")
    return result


def _scenario(result: DemoResult) -> None:
    say = result.lines.append
    AgentSettings.objects.update_or_create(
        agent_name=AGENT, defaults={"budget": BUDGET, "correction_budget": CORRECTION_BUDGET, "top_n": TOP_N}
    )

    first = run_turns_now(
        user_id=USER, agent_name=AGENT, thread_id="article-1", messages=FIRST_TURN, model_output=FIRST_UPDATE
    )
    facts = [c for c in first.candidates if c.kind == "fact"]
    result.roles = list(first.roles)
    result.candidates = len(facts)
    result.saved = first.saved
    result.rejected = {c.key: list(c.reasons) for c in facts if c.verdict != "accepted"}
    say(f"过滤后角色：{result.roles}；候选 {result.candidates} 条，保存 {result.saved} 条")
    for key, reasons in result.rejected.items():
        say(f"  拒绝 {key}：{', '.join(reasons)}")

    correction = run_turns_now(
        user_id=USER, agent_name=AGENT, thread_id="article-2", messages=CORRECTION_TURN, model_output=CORRECTION_UPDATE
    )
    result.correction_saved = correction.saved
    say(f"添加用户级纠正：保存 {correction.saved} 条")

    # As the article does: read the files again and rebuild the index from them alone.
    snap = snapshots.snapshot(get_store(), workers=1)
    result.reread_cards = len(snap.cards)
    indexbuild.rebuild_from_snapshot(snap)
    say(f"重新读取文件：{len(snap.cards)} 张卡片、{len(snap.profiles)} 份画像；已从文件重建索引")

    memory = LocalMemory()
    alice = MemoryContext(user_id=USER, agent_name=AGENT, thread_id="article-3")
    other = MemoryContext(user_id=OTHER_USER, agent_name=AGENT, thread_id="article-3")
    result.search = [hit["content"] for hit in memory.search(alice, "中文")]
    result.other_search = [hit["content"] for hit in memory.search(other, "中文")]
    say(f"检索中文偏好：{result.search}")
    say(f"其他用户检索：{result.other_search}")

    result.auto = memory.context(alice, mode="auto")
    result.tool = memory.context(alice, mode="tool")
    by_id = {item.card.id: item.card for item in snap.cards.values() if item.card is not None}
    say("")
    say(f"auto 模式（{result.auto['tokens']} token）：")
    say(f"共享画像：{PROFILE_TEXT}" if PROFILE_TEXT in result.auto["text"] else "共享画像：（无）")
    for fact_id in result.auto["included"]:
        card = by_id.get(fact_id)
        if card is not None:
            say(("纠正事实：" if card.category == "correction" else "普通事实：") + card.content)
    say("")
    say(f"tool 模式（{result.tool['tokens']} token）：")
    say(f"共享画像：{PROFILE_TEXT}" if PROFILE_TEXT in result.tool["text"] else "共享画像：（无）")
    say("")
    say(f"（预算：共 {BUDGET} token，纠正 {CORRECTION_BUDGET} token，最多 {TOP_N} 条事实；以下为 auto 模式的注入原文）")
    say(result.auto["text"])
