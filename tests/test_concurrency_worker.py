"""Several `db_worker` processes on one queue: every job runs exactly once.

django_tasks_db claims a job with SELECT … FOR UPDATE SKIP LOCKED on PostgreSQL; on
SQLite the IMMEDIATE transactions serialize the claims. Both are tested here (the
suite runs on both, see `make test-postgres`).
"""

from __future__ import annotations

import collections
import os
import subprocess
from pathlib import Path

import pytest

from .helpers_reliability.procs import Env, on_postgres, report_numbers

JOBS = int(os.environ.get("WORKER_JOBS", "60"))
WORKERS = 3


@pytest.mark.slow
def test_several_workers_never_run_a_job_twice(proc_env: Env, tmp_path: Path) -> None:
    env = dict(proc_env.vars, TASKS_BACKEND="django_tasks_db.DatabaseBackend")
    log = tmp_path / "runs.log"
    worker_env = Env(env, proc_env.root)
    worker_env.run(worker_env.helper("enqueue_tasks.py"), str(JOBS), str(log))
    args = ["manage.py", "db_worker", "--batch", "--no-startup-delay", "--no-reload", "--interval", "0.05",
            "--skip-checks", "-v", "0"]  # fmt: skip
    workers = [worker_env.popen(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(WORKERS)]
    outputs = [w.communicate(timeout=300) for w in workers]
    assert [w.returncode for w in workers] == [0] * WORKERS, outputs
    runs = [line.split() for line in log.read_text().splitlines()]
    counts = collections.Counter(int(n) for n, _ in runs)
    twice = sorted(n for n, c in counts.items() if c > 1)
    assert twice == [], f"jobs run more than once: {twice[:20]}"
    assert sorted(counts) == list(range(JOBS)), "every job ran"
    per_worker = collections.Counter(pid for _, pid in runs)
    status = worker_env.django(
        "from django_tasks_db.models import DBTaskResult as R; import collections; "
        "print(dict(collections.Counter(R.objects.values_list('status', flat=True))))"
    ).strip()
    assert status == f"{{'SUCCESSFUL': {JOBS}}}", status
    report_numbers(
        "db-workers", database="postgresql" if on_postgres() else "sqlite", jobs=JOBS, workers=WORKERS,
        runs=len(runs), duplicates=len(twice), per_worker=sorted(per_worker.values()),
    )  # fmt: skip
