"""python scale_writer.py — a writer process of one "machine" (tests/test_scale_two_machines.py).

Reads commands on stdin: ``one WORD`` writes one card for alice × coder whose content
holds WORD and prints ``ok WORD`` once the write function has returned; ``burst`` writes
batches of cards until the process is killed (printing ``burst`` once it has started).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import django

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryadmin.settings")
django.setup()

from django.utils import timezone  # noqa: E402

from facts.storage.cardfile import Card, Source  # noqa: E402
from facts.storage.ids import new_fact_id  # noqa: E402
from facts.storage.writer import Put, commit  # noqa: E402


def card(word: str, n: int = 0) -> Card:
    now = timezone.now()
    return Card(
        id=new_fact_id(),
        key=f"note_{word}_{n}",
        category="context",
        confidence=0.9,
        user_id="alice",
        agent_name="coder",
        created_at=now,
        updated_at=now,
        source=Source(kind="import"),
        content=f"Alice keeps the {word} notes in folder {n}.",
    )


for line in sys.stdin:
    command, _, word = line.strip().partition(" ")
    if command == "one":
        commit([Put(card(word))], actor="machine-a", reason="scale test")
        print(f"ok {word}", flush=True)
    elif command == "burst":
        print("burst", flush=True)
        n = 0
        while True:
            commit([Put(card("burst", n + i)) for i in range(20)], actor="machine-a", reason="scale test")
            n += 20
