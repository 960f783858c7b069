"""The labelled retrieval evaluation of issue 19 (tests/data/hybrid_eval.json).

Shared by `tests/test_hybrid_eval.py` (which holds its floor) and
`bench/bench_hybrid.py` (which prints it). The facts go straight into the search index
of the current ``MEMORY_ROOT`` through `index.update` (the write hook's own entry), so
no database is needed; `run` then searches them the way the agents' tool does.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "hybrid_eval.json"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
USER, AGENT = "eval-user", "eval-agent"
K = 5


def load() -> dict[str, Any]:
    return json.loads(DATA.read_text(encoding="utf-8"))


def fact_id(label: str) -> str:
    return "fact_" + hashlib.sha256(label.encode()).hexdigest()[:12]


def index_facts(data: dict[str, Any]) -> None:
    """Every fact of the set as an active card of one user × agent, same age and
    confidence (so only relevance orders them)."""
    from facts.storage.cardfile import Card, Source
    from retrieval import index, indexconn

    indexconn.connection()  # an empty store's index is made by its first read; a write never waits for one
    cards = [
        Card(
            id=fact_id(label),
            key=f"eval_{label}",
            category="preference",
            confidence=0.9,
            user_id=USER,
            agent_name=AGENT,
            created_at=NOW,
            updated_at=NOW,
            source=Source(kind="manual"),
            content=content,
        )
        for label, content in data["facts"].items()
    ]
    index.update(cards, [])


def run(data: dict[str, Any]) -> dict[str, Any]:
    """recall@5 and MRR, overall and per kind, plus the queries that missed."""
    from retrieval.search import search

    labels = {fact_id(label): label for label in data["facts"]}
    per_kind: dict[str, list[tuple[float, float]]] = defaultdict(list)
    misses = []
    for query in data["queries"]:
        hits = search(query["q"], user_id=USER, agent_name=AGENT, limit=K, now=NOW)
        got = [labels[hit.id] for hit in hits]
        relevant = set(query["relevant"])
        recall = len(relevant & set(got)) / len(relevant)
        first = next((rank for rank, label in enumerate(got, 1) if label in relevant), None)
        reciprocal = 1 / first if first else 0.0
        per_kind[query["kind"]].append((recall, reciprocal))
        per_kind["all"].append((recall, reciprocal))
        if recall < 1:
            misses.append({"q": query["q"], "kind": query["kind"], "want": sorted(relevant), "got": got})
    return {
        kind: {
            "queries": len(rows),
            "recall@5": round(sum(r for r, _ in rows) / len(rows), 3),
            "mrr": round(sum(m for _, m in rows) / len(rows), 3),
        }
        for kind, rows in sorted(per_kind.items())
    } | {"misses": misses}
