"""Conversations for the erasure tests: each user's words are unique to them, so a byte
search can prove they are gone (and that the other user's are still there)."""

from __future__ import annotations

from typing import Any

from tests.factories import fact_candidate

# Words that appear only in xena's conversations, facts, candidates and profile.
XENA_WORDS = {
    "thread1_fact": "zorblaxcanary",
    "thread1_rejected": "quimbletrout",
    "thread1_assistant": "wexholtspire",
    "thread1_summary": "frobnitzelmigration",
    "thread1_project": "glimmerwharf",
    "thread2_fact": "vextrapolka",
}
YURI_WORDS = {"fact": "sunnyplatypus", "project": "brambleokapi"}


def turns() -> list[dict[str, Any]]:
    w, y = XENA_WORDS, YURI_WORDS
    return [
        {
            "user_id": "xena",
            "agent_name": "coder",
            "thread_id": "x-t1",
            "project_id": "p1",
            "messages": [
                {
                    "role": "user",
                    "content": f"I always deploy with {w['thread1_fact']} pipelines. We are in the middle of the "
                    f"{w['thread1_summary']} project. Our team stores data in {w['thread1_project']} clusters. "
                    f"Maybe {w['thread1_rejected']} later.",
                    "id": "x1",
                },
                {"role": "assistant", "content": f"Noted, {w['thread1_assistant']} is ready.", "id": "x2"},
            ],
            "model_output": {
                "facts": [
                    fact_candidate(
                        "deploy_tool", f"User deploys with {w['thread1_fact']} pipelines.", w["thread1_fact"], "x1"
                    ),
                    fact_candidate(
                        "maybe_later",
                        f"User might try {w['thread1_rejected']}.",
                        w["thread1_rejected"],
                        "x1",
                        confidence=0.2,
                    ),
                    fact_candidate(
                        "datastore",
                        f"The project stores data in {w['thread1_project']} clusters.",
                        w["thread1_project"],
                        "x1",
                        scope="project",
                        category="context",
                    ),
                ],
                "summaries": [
                    {
                        "section": "topOfMind",
                        "summary": f"In the middle of the {w['thread1_summary']} project.",
                        "scope": "user",
                        "authority": "descriptive",
                        "evidence_message_id": "x1",
                        "evidence_text": w["thread1_summary"],
                    }
                ],
            },
        },
        {
            "user_id": "xena",
            "agent_name": "coder",
            "thread_id": "x-t2",
            "messages": [{"role": "user", "content": f"I drink {w['thread2_fact']} tea every day.", "id": "x3"}],
            "model_output": {
                "facts": [fact_candidate("tea", f"User drinks {w['thread2_fact']} tea.", w["thread2_fact"], "x3")]
            },
        },
        {
            "user_id": "yuri",
            "agent_name": "coder",
            "thread_id": "y-t1",
            "project_id": "p1",
            "messages": [
                {
                    "role": "user",
                    "content": f"I prefer mornings with {y['fact']}. The project builds on {y['project']} queues.",
                    "id": "y1",
                }
            ],
            "model_output": {
                "facts": [
                    fact_candidate("mornings", f"User prefers mornings with {y['fact']}.", y["fact"], "y1"),
                    fact_candidate(
                        "queues",
                        f"The project builds on {y['project']} queues.",
                        y["project"],
                        "y1",
                        scope="project",
                        category="context",
                    ),
                ]
            },
        },
    ]
