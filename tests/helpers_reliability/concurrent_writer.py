"""Writer process of the concurrency tests.

    python concurrent_writer.py seed K              → creates K cards, prints their ids (JSON)
    python concurrent_writer.py locked IDS N        → N counter increments with update_card
    python concurrent_writer.py optimistic IDS N    → N increments as the dashboard does them:
                                                      read, then commit with expected_revision,
                                                      retry on RevisionConflict
    python concurrent_writer.py create _ N          → N new cards, one commit each
    python concurrent_writer.py reindex STOPFILE    → rebuild mirror + index in a loop until
                                                      STOPFILE exists

IDS is a comma-separated list of fact ids (all of user "alice", agent "coder"). Prints
one JSON line of counts: attempted, committed, retried, db_locked, lock_timeouts, errors.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import django

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryadmin.settings")
django.setup()

from datetime import UTC, datetime  # noqa: E402

from django.db import OperationalError  # noqa: E402

from facts.storage.cardfile import Card, Source  # noqa: E402
from facts.storage.errors import LockTimeout, RevisionConflict  # noqa: E402
from facts.storage.ids import new_fact_id  # noqa: E402
from facts.storage.store import Bucket, get_store  # noqa: E402
from facts.storage.writer import Put, commit, save_card, update_card  # noqa: E402

BUCKET = Bucket(user_id="alice", agent_name="coder")
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _increment(card: Card) -> Card:
    return card.model_copy(update={"confirmation_count": card.confirmation_count + 1})


def main() -> None:
    mode = sys.argv[1]
    stats: dict[str, Any] = {
        "attempted": 0,
        "committed": 0,
        "retried": 0,
        "db_locked": 0,
        "lock_timeouts": 0,
        "errors": [],
    }
    if mode in ("seed", "create"):
        ids = []
        for n in range(int(sys.argv[2] if mode == "seed" else sys.argv[3])):
            card = Card(
                id=new_fact_id(), key=f"counter_{n}", category="context", confidence=0.9, user_id="alice",
                agent_name="coder", created_at=NOW, updated_at=NOW, source=Source(kind="manual"),
                content=f"Counter card {n}.",
            )  # fmt: skip
            stats["attempted"] += 1
            ids.append(save_card(card, actor=mode, expected_revision=None).id)
            stats["committed"] += 1
        print(json.dumps(ids if mode == "seed" else stats))
        return
    if mode == "reindex":
        from memoryadmin import rebuild

        stop = Path(sys.argv[2])
        runs = 0
        while not stop.exists() or runs == 0:
            stats["attempted"] += 1
            try:
                rebuild.rebuild(actor="reindex")
                runs += 1
            except OperationalError as exc:
                stats["db_locked"] += "locked" in str(exc)
                stats["errors"].append(repr(exc))
            except Exception as exc:  # reported to the test, never hidden
                stats["errors"].append(repr(exc))
        stats["committed"] = runs
        print(json.dumps(stats))
        return
    ids = sys.argv[2].split(",")
    store = get_store()
    for i in range(int(sys.argv[3])):
        fact_id = ids[i % len(ids)]
        stats["attempted"] += 1
        while True:
            try:
                if mode == "locked":
                    update_card(BUCKET, fact_id, _increment, actor=f"w{os.getpid()}", reason="increment")
                else:
                    current = store.read_card(BUCKET, fact_id)
                    assert current is not None
                    commit([Put(_increment(current), current.revision)], actor=f"o{os.getpid()}", reason="increment")
                stats["committed"] += 1
                break
            except RevisionConflict:
                stats["retried"] += 1
            except LockTimeout:
                stats["lock_timeouts"] += 1
                stats["retried"] += 1
            except OperationalError as exc:
                if "locked" not in str(exc):
                    raise
                stats["db_locked"] += 1
                stats["retried"] += 1
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
