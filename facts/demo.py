"""Demo data: realistic replayed conversations run through the real pipeline and gate.

`facts/demo_data/demo.jsonl` holds two users (one writes Chinese, one English), several
agents and projects, with tool calls, uploads, greetings, injected memory, project
rules, a one-off language request, grants to push and later corrections. The model's
answers are part of the file (replay), so no model is called. Loading is idempotent:
messages already extracted are never fed again.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.db.models import Q

from facts.judging.pipeline import run_turns_now
from facts.models import ExtractedMessage

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

DEMO_FILE = Path(__file__).parent / "demo_data" / "demo.jsonl"


def demo_lines(path: Path = DEMO_FILE) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _already_loaded(line: dict[str, Any]) -> bool:
    ids = [m.get("id") for m in line["messages"] if m.get("id")]
    done = ExtractedMessage.objects.filter(
        Q(user_id=line["user_id"], thread_id=line["thread_id"]), message_id__in=ids
    ).count()
    return bool(ids) and done >= len(ids)


def load_demo(stdout: SupportsWrite[str], path: Path = DEMO_FILE) -> dict[str, int]:
    """Ingest the demo turns; print what happened. Returns verdict counts."""
    verdicts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    loaded = skipped = saved = 0
    for line in demo_lines(path):
        if _already_loaded(line):
            skipped += 1
            continue
        result = run_turns_now(**line)
        loaded += 1
        saved += result.saved
        for candidate in result.candidates:
            verdicts[candidate.verdict] += 1
            reasons.update(candidate.reasons)
    if loaded:
        stdout.write(
            f"Demo: {loaded} conversation(s) ingested, {verdicts['accepted']} candidate(s) accepted, "
            f"{verdicts['rejected']} rejected, {saved} fact card(s) written.\n"
        )
        if reasons:
            stdout.write("Rejections: " + ", ".join(f"{code} {n}" for code, n in sorted(reasons.items())) + "\n")
    else:
        stdout.write(f"Demo already loaded ({skipped} conversation(s)); nothing changed.\n")
    return {"loaded": loaded, "skipped": skipped, "saved": saved, **verdicts}
