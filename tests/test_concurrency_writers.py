"""Concurrency: several writer processes and a rebuild on the same cards at once.

Counter increments make a lost update visible: the final count must equal the number
of increments. Processes, not threads, because the locks are cross-process.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from facts.storage.store import Bucket, Store

from .helpers_reliability.procs import Env, report_numbers

INCREMENTS = int(os.environ.get("CONCURRENCY_INCREMENTS", "25"))


def _stats(proc) -> dict:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
def test_writers_and_a_rebuild_at_once_lose_no_update(proc_env: Env, tmp_path) -> None:
    helper = proc_env.helper("concurrent_writer.py")
    # a few hundred bystander cards make each rebuild long enough to overlap the writes
    proc_env.run(helper, "seed", "300")
    ids = json.loads(proc_env.run(helper, "seed", "3").stdout)
    joined = ",".join(ids)
    modes = ["locked", "locked", "optimistic"]
    stop = tmp_path / "stop"
    rebuilder = proc_env.popen(helper, "reindex", str(stop), stdout=subprocess.PIPE)
    writers = [proc_env.popen(helper, mode, joined, str(INCREMENTS), stdout=subprocess.PIPE) for mode in modes]
    creator = proc_env.popen(helper, "create", "_", str(INCREMENTS), stdout=subprocess.PIPE)
    results = [_stats(p) for p in writers]
    created = _stats(creator)
    stop.touch()
    rebuild = _stats(rebuilder)
    total = {k: sum(r[k] for r in results) for k in ("attempted", "committed", "retried", "db_locked", "lock_timeouts")}
    report_numbers("concurrency-writers+rebuild", writers=len(writers), **total, rebuilds=rebuild["committed"])
    assert total["committed"] == total["attempted"] == INCREMENTS * len(writers)
    assert created["committed"] == INCREMENTS
    assert total["db_locked"] == 0, "'database is locked' must never reach a caller"
    assert rebuild["errors"] == [], rebuild["errors"]
    store = Store(proc_env.root)
    counts = [store.read_card(Bucket(user_id="alice", agent_name="coder"), i).confirmation_count for i in ids]
    assert sum(counts) == INCREMENTS * len(writers), counts
    code, report = proc_env.check_drift()
    assert code == 0, f"mirror left behind the files by a concurrent rebuild: {report}"
