"""A rebuild (`manage.py reindex`) killed with SIGKILL midway: the old mirror and index
keep serving, and the next rebuild finishes cleanly.

Mirror and index are each replaced in one transaction, so after a kill each is either
entirely the old one or entirely the new one — never a mixture, never a corrupt file.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from .helpers_reliability.procs import Checker, Env, report_numbers

KILLS = int(os.environ.get("REBUILD_KILLS", "3"))
SEEDED, ADDED = 2100, 300  # enough cards for the parallel scan, and for a rebuild to take a while


def _drift_sizes(report: dict) -> dict[str, int]:
    return {part: sum(len(report[part][k]) for k in ("missing", "extra", "changed")) for part in ("mirror", "index")}


@pytest.mark.slow
def test_a_killed_rebuild_leaves_the_old_state_or_the_new_one(proc_env: Env) -> None:
    proc_env.run(proc_env.helper("seed_cards.py"), str(SEEDED), "--raw")
    started = time.monotonic()
    proc_env.manage("reindex", "--no-progress")  # the old state: mirror and index of SEEDED cards
    rebuild_seconds = time.monotonic() - started
    proc_env.run(proc_env.helper("seed_cards.py"), str(ADDED), "--raw")  # files the copies have not seen
    check = Checker(proc_env)
    old = _drift_sizes(check())
    assert old == {"mirror": ADDED, "index": ADDED}
    rng = random.Random(5)
    outcomes = {"old": 0, "new": 0, "finished": 0}
    for _ in range(KILLS):
        rebuild = subprocess.Popen(
            [sys.executable, "manage.py", "reindex", "--no-progress", "--skip-checks"],
            cwd=proc_env.vars["PYTHONPATH"], env=proc_env.vars, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(rng.uniform(0.3, max(0.6, rebuild_seconds)))
        if rebuild.poll() is None:
            os.killpg(rebuild.pid, signal.SIGKILL)  # the scan's pool workers too
        rebuild.wait(timeout=60)
        report = check()
        sizes = _drift_sizes(report)
        for part in ("mirror", "index"):
            assert sizes[part] in (0, old[part]), f"{part} is a mixture after a killed rebuild: {sizes}"
        assert report["unreadable"] == [], "a killed rebuild must not damage any file"
        if rebuild.returncode == 0:
            outcomes["finished"] += 1
        else:
            outcomes["new" if sizes == {"mirror": 0, "index": 0} else "old"] += 1
        if sizes == {"mirror": 0, "index": 0}:  # it got through: make work for the next round
            proc_env.run(proc_env.helper("seed_cards.py"), str(ADDED), "--raw")
            old = _drift_sizes(check())
    check.close()
    proc_env.manage("reindex", "--no-progress")
    code, report = proc_env.check_drift()
    assert code == 0, json.dumps(report)[:500]
    report_numbers(
        "crash-rebuild", kills=KILLS, **outcomes, cards=SEEDED + ADDED, rebuild_seconds=round(rebuild_seconds, 2)
    )
