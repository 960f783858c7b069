"""Scoring the built-in rule extractor against the labelled snippets in
`tests/data/rules_extractor_eval.jsonl` (used by `test_extract_rules.py` and
`bench/bench_rules_extractor.py`).

Each snippet is a short conversation (`messages`: [role, text] pairs, ids m0, m1, …),
an optional `project_id`, and `keep`: the facts a careful person would store, each as
[index of the user message that says it, [words its content must contain]]. Negative
snippets (temporary, transactional, questions, the assistant's words, greetings, tasks,
other people, hypotheticals, hedges) keep nothing.

A candidate counts when the gate accepts it (same rules as production: scope, durability,
authority, confidence ≥ threshold, evidence in the user's message). Precision: accepted
candidates that match a kept fact / accepted candidates. Recall: kept facts matched by an
accepted candidate / kept facts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "rules_extractor_eval.jsonl"


def load(path: Path = DATA) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass
class Score:
    snippets: int = 0
    candidates: int = 0
    accepted: int = 0
    correct: int = 0
    kept: int = 0
    found: int = 0
    wrong: list[tuple[str, str]] = field(default_factory=list)  # (snippet id, accepted content)
    missed: list[tuple[str, str]] = field(default_factory=list)  # (snippet id, words)
    evidence_not_user: int = 0

    @property
    def precision(self) -> float:
        return self.correct / self.accepted if self.accepted else 1.0

    @property
    def recall(self) -> float:
        return self.found / self.kept if self.kept else 1.0


def rows_of(snippet: dict[str, Any]) -> list[Any]:
    from facts.intake.filtering import filter_messages

    messages = [{"id": f"m{i}", "role": role, "content": text} for i, (role, text) in enumerate(snippet["messages"])]
    return filter_messages(messages)


def judge(snippet: dict[str, Any], *, threshold: float = 0.7) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(every candidate, the accepted ones) of one snippet."""
    from facts.judging import gate
    from facts.judging.rules_extractor import extractor
    from facts.judging.schemas import parse_update

    rows = rows_of(snippet)
    facts = extractor.extract_facts(rows)
    accepted = []
    for fact, parsed in zip(facts, parse_update({"facts": facts}), strict=True):
        assert parsed.valid, (snippet["id"], parsed.error)
        reasons = gate.judge_fact(parsed.value, rows, project_id=snippet.get("project_id") or None, threshold=threshold)  # type: ignore[arg-type]
        if not reasons:
            accepted.append(fact)
    return facts, accepted


def score(snippets: list[dict[str, Any]], *, threshold: float = 0.7) -> Score:
    result = Score()
    for snippet in snippets:
        result.snippets += 1
        facts, accepted = judge(snippet, threshold=threshold)
        roles = {f"m{i}": role for i, (role, _text) in enumerate(snippet["messages"])}
        result.candidates += len(facts)
        result.evidence_not_user += sum(1 for f in facts if roles.get(f["evidence_message_id"]) != "user")
        keep = [(f"m{index}", [w.casefold() for w in words]) for index, words in snippet["keep"]]
        result.kept += len(keep)
        matched: set[int] = set()
        for fact in accepted:
            result.accepted += 1
            content = fact["content"].casefold()
            hits = [
                i
                for i, (message_id, words) in enumerate(keep)
                if fact["evidence_message_id"] == message_id and all(w in content for w in words)
            ]
            if hits:
                result.correct += 1
                matched.update(hits)
            else:
                result.wrong.append((snippet["id"], fact["content"]))
        result.found += len(matched)
        result.missed += [(snippet["id"], " ".join(words)) for i, (_m, words) in enumerate(keep) if i not in matched]
    return result
