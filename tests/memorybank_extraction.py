"""Scoring an extractor on real conversations: MemoryBank's user lines and our labels.

The conversations are MemoryBank's (Zhong et al., AAAI 2024; MIT licence; see
`tests/data/memorybank/README.md`); the labels are ours: for every user line, the facts a
careful curator would keep (`durable`) and the dated happenings it reports (`event`).

Each user line is one turn. A candidate counts when the gate accepts it, as in
production. It is **right** when its line has a labelled fact or event and it mentions
one of that label's keywords (an English keyword matches by a light stem: "hiking" finds
"hike"). **Precision** = right / accepted. **Recall** = durable labels matched by an
accepted candidate / durable labels (events are not memory proper, so they never count
as missed). The keyword match is generous about *which* label a candidate found and
blind to a true-but-garbled sentence, so the accepted facts are also read by hand
(docs/extraction.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "memorybank"
LANGS = ("en", "zh")


def load(lang: str) -> list[dict[str, Any]]:
    path = DATA / f"lines_{lang}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _stem(word: str) -> str:
    w = word.lower()
    for suffix in ("ing", "ies", "es", "ed", "er", "s"):
        if len(w) > len(suffix) + 2 and w.endswith(suffix):
            return w[: -len(suffix)]
    return w


def _mentions(content: str, keyword: str) -> bool:
    content, keyword = content.casefold(), keyword.casefold()
    if keyword in content:
        return True
    words = re.findall(r"[a-z0-9']+", keyword)
    if not words:
        return False
    stems = {_stem(w) for w in re.findall(r"[a-z0-9']+", content)}
    return all(_stem(w) in stems for w in words)


@dataclass
class Score:
    lines: int = 0
    candidates: int = 0
    accepted: int = 0
    right: int = 0
    durable: int = 0
    found: int = 0
    wrong: list[tuple[str, str, str]] = field(default_factory=list)  # (line id, content, user text)
    right_list: list[tuple[str, str]] = field(default_factory=list)  # (line id, content)

    @property
    def precision(self) -> float:
        return self.right / self.accepted if self.accepted else 1.0

    @property
    def recall(self) -> float:
        return self.found / self.durable if self.durable else 1.0


def accepted_facts(text: str, *, threshold: float = 0.7) -> tuple[int, list[dict[str, Any]]]:
    """(candidates proposed, the accepted ones) for one user line through the rules and the gate."""
    from facts.intake.filtering import filter_messages
    from facts.judging import gate
    from facts.judging.rules_extractor import extractor
    from facts.judging.schemas import parse_update

    rows = filter_messages([{"id": "u1", "role": "user", "content": text}])
    facts = extractor.extract_facts(rows)
    accepted = []
    for fact, parsed in zip(facts, parse_update({"facts": facts}), strict=True):
        if parsed.valid and not gate.judge_fact(parsed.value, rows, project_id=None, threshold=threshold):  # type: ignore[arg-type]
            accepted.append(fact)
    return len(facts), accepted


def score(lines: Iterable[dict[str, Any]]) -> Score:
    result = Score()
    for line in lines:
        result.lines += 1
        proposed, accepted = accepted_facts(line["user"])
        result.candidates += proposed
        labels = line["facts"]
        durable = [i for i, label in enumerate(labels) if label["kind"] == "durable"]
        result.durable += len(durable)
        matched: set[int] = set()
        for fact in accepted:
            result.accepted += 1
            hits = {
                i for i, label in enumerate(labels) if any(_mentions(fact["content"], k) for k in label["keywords"])
            }
            if hits:
                result.right += 1
                result.right_list.append((line["id"], fact["content"]))
                matched |= hits
            else:
                result.wrong.append((line["id"], fact["content"], line["user"]))
        result.found += len(matched & set(durable))
    return result


def by_split(lang: str) -> dict[str, Score]:
    lines = load(lang)
    return {split: score(line for line in lines if line["split"] == split) for split in ("dev", "holdout")}
