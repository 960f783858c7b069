"""Crash harness: a writer process killed with SIGKILL at random moments, many times.

Usage: python crash_writer.py LEDGER --kills N --seed S [--min-ms 20 --max-ms 300]

The parent sets Django up once, then forks a writer child per round. The child writes
through the single write function only (new cards in batches, counter increments with
`update_card`, deletions, profile edits) and reports every write on a pipe with one
unbuffered `os.write` *after* the write function has returned: those are the
acknowledged writes. The parent kills the child with SIGKILL after a random delay,
collects what it acknowledged, and forks the next one. At the end it writes the ledger
of acknowledged writes (JSON) for the test to check against the files.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any

import django

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryadmin.settings")
django.setup()

from datetime import UTC, datetime  # noqa: E402

from facts.storage.cardfile import Card, Source  # noqa: E402
from facts.storage.errors import RevisionConflict  # noqa: E402
from facts.storage.ids import new_fact_id  # noqa: E402
from facts.storage.profilefile import Section  # noqa: E402
from facts.storage.store import Bucket  # noqa: E402
from facts.storage.writer import Delete, Put, commit, commit_profile, update_card  # noqa: E402

USERS = ["alice", "bob@example.com", "../carol", "dave"]
AGENTS = ["coder", None]
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _card(rng: random.Random) -> Card:
    user = rng.choice(USERS)
    n = rng.randrange(10**9)
    return Card(
        id=new_fact_id(),
        key=f"k{n}",
        category=rng.choice(["preference", "context", "goal", "correction"]),
        confidence=round(rng.random(), 3),
        user_id=user,
        agent_name=rng.choice(AGENTS),
        created_at=NOW,
        updated_at=NOW,
        source=Source(kind="manual"),
        content=f"Fact {n} of {user}: " + "x" * rng.randrange(0, 2000),
    )


def _ack(fd: int, record: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(record) + "\n").encode())


def child(fd: int, seed: int, alive: list[dict[str, Any]]) -> None:
    rng = random.Random(seed)
    known: list[dict[str, Any]] = [dict(item) for item in alive]
    while True:
        roll = rng.random()
        if roll < 0.45 or not known:
            cards = [_card(rng) for _ in range(rng.randint(1, 4))]
            result = commit([Put(card) for card in cards], actor="crash", reason="create")
            for card in result.written:
                item: dict[str, Any] = {"op": "put", "id": card.id, "user": card.user_id, "agent": card.agent_name,
                        "rev": card.revision, "count": card.confirmation_count}  # fmt: skip
                _ack(fd, item)
                known.append(item)
        elif roll < 0.85:
            item = rng.choice(known)
            bucket = Bucket(user_id=item["user"], agent_name=item["agent"])
            try:
                card = update_card(
                    bucket,
                    item["id"],
                    lambda c: c.model_copy(update={"confirmation_count": c.confirmation_count + 1}),
                    actor="crash",
                    reason="increment",
                )
            except RevisionConflict:  # deleted by a killed predecessor whose ack never came
                known.remove(item)
                continue
            item.update(rev=card.revision, count=card.confirmation_count)
            _ack(fd, {"op": "put", **{k: item[k] for k in ("id", "user", "agent")}, "rev": card.revision,
                      "count": card.confirmation_count})  # fmt: skip
        elif roll < 0.95:
            item = known.pop(rng.randrange(len(known)))
            _ack(fd, {"op": "del-begin", "id": item["id"]})
            card = Card(**{**_card(rng).model_dump(), "id": item["id"], "user_id": item["user"],
                           "agent_name": item["agent"]})  # fmt: skip
            commit([Delete(card)], actor="crash", reason="delete")
            _ack(fd, {"op": "del", "id": item["id"]})
        else:
            user = rng.choice(USERS)
            text = f"summary {rng.randrange(10**6)}"

            def change(profile, text=text):
                profile.set_section("topOfMind", Section(summary=text))
                return profile

            profile = commit_profile(user, change, actor="crash", reason="profile")
            _ack(fd, {"op": "profile", "user": user, "rev": profile.revision, "summary": text})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ledger")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--min-ms", type=int, default=20)
    parser.add_argument("--max-ms", type=int, default=300)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    from django.db import connections

    connections.close_all()  # each child opens its own connection
    # Like a started worker (`hooks.worker_started`): the tokenizers are loaded before the
    # writers fork, so the kill windows measure writes, not a per-child ~0.5 s load.
    from retrieval.warmup import warm

    warm()
    puts: dict[str, dict[str, Any]] = {}
    deleted: set[str] = set()
    in_flight_deletes: set[str] = set()
    profiles: dict[str, dict[str, Any]] = {}
    acks = 0
    for round_no in range(args.kills):
        alive = [item for fid, item in puts.items() if fid not in deleted and fid not in in_flight_deletes]
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            try:
                child(write_fd, args.seed * 100_003 + round_no, alive)
            finally:
                os._exit(3)
        os.close(write_fd)
        deadline = time.monotonic() + rng.uniform(args.min_ms, args.max_ms) / 1000
        chunks: list[bytes] = []
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([read_fd], [], [], left)
            if ready:
                data = os.read(read_fd, 65536)
                if not data:
                    break
                chunks.append(data)
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
            raise SystemExit(f"writer child ended by itself (status {status}): it must only ever be killed")
        while data := os.read(read_fd, 65536):
            chunks.append(data)
        os.close(read_fd)
        for line in b"".join(chunks).decode().splitlines():
            record = json.loads(line)
            acks += 1
            if record["op"] == "put":
                puts[record["id"]] = record
            elif record["op"] == "del-begin":
                in_flight_deletes.add(record["id"])
            elif record["op"] == "del":
                deleted.add(record["id"])
                in_flight_deletes.discard(record["id"])
            else:
                profiles[record["user"]] = record
    Path(args.ledger).write_text(
        json.dumps(
            {
                "kills": args.kills,
                "acks": acks,
                "puts": puts,
                "deleted": sorted(deleted),
                "in_flight_deletes": sorted(in_flight_deletes - deleted),
                "profiles": profiles,
            }
        )
    )


if __name__ == "__main__":
    main()
