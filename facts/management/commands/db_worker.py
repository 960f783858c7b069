"""`manage.py db_worker`: django-tasks-db's worker, plus a sweep of lapsed claims.

A worker killed mid-extraction leaves its turns `processing` and its job row `RUNNING`
for good: nothing in the queue will ever run that job again. So every worker sweeps —
once at start (a restarted worker picks the turns up at once if their lease has
passed) and then every quarter lease from a background thread, without waiting for a
new turn to arrive — and re-enqueues the threads whose claims lapsed
(`facts.tasks.reclaim_expired`). This command takes the name of django-tasks-db's
(facts is listed before django_tasks_db in INSTALLED_APPS), so `make run`, `make
worker` and any production recipe that runs `db_worker` sweep without a second process.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from django.db import close_old_connections, connections
from django.utils.autoreload import DJANGO_AUTORELOAD_ENV
from django_tasks_db.management.commands import db_worker

from facts import injections
from facts.intake import claims
from facts.storage import hooks

log = logging.getLogger("facts.intake.claims")


def sweep() -> int:
    from facts.tasks import reclaim_expired

    try:
        injections.prune()  # the injection log's retention (MEMORY_INJECTION_LOG_DAYS)
    except Exception:
        log.warning("pruning the injection log failed", exc_info=True)
    try:
        return reclaim_expired()
    except Exception:  # a busy or briefly unreachable database: the next sweep retries
        log.warning("the sweep of lapsed claims failed", exc_info=True)
        return 0


class Sweeper(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="claim-sweeper", daemon=True)
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.wait(claims.sweep_interval()):
                close_old_connections()
                sweep()
        finally:
            connections.close_all()


class Command(db_worker.Command):
    help = (
        "Run the database background worker; it also hands back turns whose worker's "
        "claim lapsed (at start and every quarter of MEMORY_CLAIM_LEASE_SECONDS)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        # With --reload the parent only watches files; the child (marked by the
        # autoreload variable) is the worker and sweeps.
        if not options.get("reload") or os.environ.get(DJANGO_AUTORELOAD_ENV) == "true":
            sweep()
            if not options.get("batch"):
                Sweeper().start()
                hooks.worker_started()
        super().handle(*args, **options)
