"""Crash safety of the write path: a writer killed with SIGKILL at random moments.

The harness (helpers_reliability/crash_writer.py) records every write the write
function acknowledged; after the kills every card must parse, no acknowledged write may
be missing, and one `reindex` must leave no drift.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from facts.storage.cardfile import Card
from facts.storage.store import Bucket, Store

from .helpers_reliability.procs import Env, report_numbers

KILLS = int(os.environ.get("CRASH_KILLS", "20"))


def _run_harness(env: Env, tmp_path: Path, kills: int, seed: int) -> dict[str, Any]:
    ledger = tmp_path / "ledger.json"
    env.run(env.helper("crash_writer.py"), str(ledger), "--kills", str(kills), "--seed", str(seed), timeout=600)
    return json.loads(ledger.read_text())


def _check_files_against_ledger(store: Store, ledger: dict[str, Any]) -> dict[str, int]:
    cards = {}
    for path in store.card_files():
        card: Card | None = store.read_card_at(path)  # raises on a torn or unparsable card
        cards[card.id] = card
    for fact_id, acked in ledger["puts"].items():
        if fact_id in ledger["deleted"] or fact_id in ledger["in_flight_deletes"]:
            continue
        card = cards.get(fact_id)
        assert card is not None, f"acknowledged write of {fact_id} is missing"
        assert card.revision >= acked["rev"], f"{fact_id}: revision went back from {acked['rev']} to {card.revision}"
        assert card.confirmation_count >= acked["count"], f"{fact_id}: an acknowledged increment was lost"
        if card.revision == acked["rev"]:
            assert card.confirmation_count == acked["count"]
        assert store.read_card(Bucket(user_id=acked["user"], agent_name=acked["agent"]), fact_id) == card
    for fact_id in ledger["deleted"]:
        assert fact_id not in cards, f"acknowledged deletion of {fact_id} came back"
    for user, acked in ledger["profiles"].items():
        profile = store.read_profile(user)
        assert profile.revision >= acked["rev"]
        if profile.revision == acked["rev"]:
            assert profile.section("topOfMind").summary == acked["summary"]
    temp_files = sum(1 for _ in store.root.rglob(".tmp-*"))
    return {"cards": len(cards), "temp_files": temp_files}


@pytest.mark.slow
def test_no_acknowledged_write_is_lost_when_the_writer_is_killed(proc_env: Env, tmp_path: Path) -> None:
    ledger = _run_harness(proc_env, tmp_path, KILLS, seed=7)
    assert ledger["acks"] > KILLS, "the writer must have acknowledged writes between the kills"
    store = Store(proc_env.root)
    seen = _check_files_against_ledger(store, ledger)
    assert seen["cards"] > 0
    _, before = proc_env.check_drift()
    behind = sum(len(before.get("mirror", {}).get(kind, [])) for kind in ("missing", "extra", "changed"))
    report_numbers(
        "crash-writer", kills=ledger["kills"], acks=ledger["acks"], cards=seen["cards"],
        temp_files_left=seen["temp_files"], mirror_rows_behind_before_reindex=behind,
    )  # fmt: skip
    proc_env.manage("reindex", "--no-progress")
    code, report = proc_env.check_drift()
    assert code == 0, report
    assert report["unreadable"] == []
    # after the rebuild the files still hold every acknowledged write
    _check_files_against_ledger(store, ledger)


@pytest.mark.slow
def test_a_killed_writer_never_leaves_a_stray_temp_file_that_reads_as_a_card(proc_env: Env, tmp_path: Path) -> None:
    ledger = _run_harness(proc_env, tmp_path, max(5, KILLS // 4), seed=11)
    store = Store(proc_env.root)
    card_files = {path.name for path in store.card_files()}
    assert not any(name.startswith(".tmp-") for name in card_files)
    assert ledger["acks"] > 0
