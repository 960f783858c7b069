"""A task that records each execution, to prove several db_worker processes never run
one job twice (tests/test_concurrency_worker.py)."""

from __future__ import annotations

import os
import time

from django_tasks import task


@task()
def record_run(n: int, path: str) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{n} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    time.sleep(0.005)  # long enough for the workers to compete for the next job
    return n
