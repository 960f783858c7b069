"""python seed_cards.py N [--raw] — N cards for users u0..u49, through the write
function (or, with --raw, written as files only: a restore or a hand copy that the
mirror and index have not seen yet)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import django

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryadmin.settings")
django.setup()

from datetime import UTC, datetime  # noqa: E402

from facts.storage.cardfile import Card, Source, dump_card  # noqa: E402
from facts.storage.ids import new_fact_id  # noqa: E402
from facts.storage.store import get_store  # noqa: E402
from facts.storage.writer import Put, commit  # noqa: E402

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
count, raw = int(sys.argv[1]), "--raw" in sys.argv
cards = [
    Card(
        id=new_fact_id(),
        key=f"seed_{n}",
        category="context",
        confidence=0.8,
        user_id=f"u{n % 50}",
        agent_name="coder",
        created_at=NOW,
        updated_at=NOW,
        source=Source(kind="import"),
        content=f"用户 {n} 偏好用中文解释技术问题, seed card number {n}.",
    )
    for n in range(count)
]
if raw:  # plain writes, no fsync: a quick fixture, not the write path under test
    store = get_store()
    for card in cards:
        path = store.card_path(card)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump_card(card), encoding="utf-8")
else:
    for start in range(0, count, 500):
        commit([Put(card) for card in cards[start : start + 500]], actor="seed", reason="seed")
print(len(cards))
