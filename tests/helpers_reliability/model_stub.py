"""The extraction model of the web concurrency test: an OpenAI-protocol server (the
test suite's `tests/openai_stub.py`) whose answer is derived from the conversation it is
sent, so every turn of the test gets its own fact.

    python model_stub.py        → prints its base URL, serves until stdin closes, then
                                  prints one JSON line: {"requests": N}

For every user message ``Note TAG: I keep my notes in folder TAG. I confirm the web
counter.`` it proposes the fact ``notes_folder_TAG``; per request it also confirms the
fact ``web_counter`` and replaces the topOfMind section of the profile (so the worker
writes the very card and memory.json the dashboard clients are editing).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.openai_stub import OpenAIStub, Reply, _completion

NOTE = re.compile(r"Note (\S+): (I keep my notes in folder \S+)\. (I confirm the web counter)")


def answer(body: dict[str, Any]) -> dict[str, Any]:
    """The MemoryUpdate arguments for one extraction request."""
    human = next((m for m in reversed(body.get("messages") or []) if m.get("role") == "user"), None)
    payload = json.loads(human["content"]) if human else {}
    facts: list[dict[str, Any]] = []
    confirmations: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    for row in payload.get("conversation") or []:
        found = NOTE.search(row.get("content") or "") if row.get("role") == "user" else None
        if not found:
            continue
        tag, quote, confirm = found.groups()
        facts.append(
            {
                "key": f"notes_folder_{tag}",
                "content": f"Keeps the notes of {tag} in their own folder.",
                "category": "context",
                "scope": "user",
                "durability": "durable",
                "authority": "descriptive",
                "confidence": 0.9,
                "evidence_message_id": row["id"],
                "evidence_text": quote,
            }
        )
        if not confirmations:
            confirmations.append({"key": "web_counter", "evidence_message_id": row["id"], "evidence_text": confirm})
        summaries[:] = [
            {
                "section": "topOfMind",
                "summary": f"Working on the notes of {tag}.",
                "scope": "user",
                "authority": "descriptive",
                "evidence_message_id": row["id"],
                "evidence_text": f"Note {tag}",
            }
        ]
    return {"facts": facts, "summaries": summaries, "confirmations": confirmations}


class DerivedStub(OpenAIStub):
    def next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append({})  # only counted
        arguments = json.dumps(answer(body), ensure_ascii=False)
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "MemoryUpdate", "arguments": arguments}}
            ],
        }
        return Reply(body=_completion(message, "tool_calls", (120, 40)))


def main() -> None:
    stub = DerivedStub().start()
    print(stub.url, flush=True)
    sys.stdin.read()  # until the test closes our stdin
    stub.stop()
    print(json.dumps({"requests": len(stub.requests)}), flush=True)


if __name__ == "__main__":
    main()
