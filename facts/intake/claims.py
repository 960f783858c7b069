"""Claimed work has a lease (docs/design.md §6).

A worker that takes turns for extraction stamps them, and the run it records, with a
claim token and a lease (`MEMORY_CLAIM_LEASE_SECONDS`, default 120 s). While it works,
a heartbeat thread renews the lease; right before it writes memory it renews it once
more and gives up if the turns are no longer its own. A worker that dies (SIGKILL, OOM,
power) stops renewing: once the lease has passed, its turns are *stuck* and the next
sweep (`facts.tasks.reclaim_expired`, run by every `db_worker` and by
`process_turns`) hands them to another worker. Message ids keep the extraction
idempotent: a late original that wakes up after the takeover finds its claim gone and
writes nothing.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connections
from django.db.models import Q, QuerySet
from django.utils import timezone

from facts.models import ExtractionRun, Turn

log = logging.getLogger(__name__)


def lease() -> timedelta:
    return timedelta(seconds=settings.MEMORY_CLAIM_LEASE_SECONDS)


def lease_until(now: datetime | None = None) -> datetime:
    return (now or timezone.now()) + lease()


def sweep_interval() -> float:
    """How often a worker looks for lapsed claims: a quarter lease (so a dead worker's
    turns wait at most 1¼ leases), never busier than twice a second."""
    return max(0.5, settings.MEMORY_CLAIM_LEASE_SECONDS / 4)


def new_token() -> str:
    return uuid.uuid4().hex


def lapsed(now: datetime) -> Q:
    """The claim's lease has passed. No lease at all: claimed before leases existed;
    nothing renews it."""
    return Q(lease_until__lt=now) | Q(lease_until__isnull=True)


def stuck_turns(now: datetime | None = None) -> QuerySet[Turn]:
    """Turns in `processing` whose worker stopped renewing its claim."""
    return Turn.objects.filter(lapsed(now or timezone.now()), status=Turn.Status.PROCESSING)


def stuck_runs(now: datetime | None = None) -> QuerySet[ExtractionRun]:
    """Runs still `running` whose worker stopped renewing its claim."""
    return ExtractionRun.objects.filter(lapsed(now or timezone.now()), status=ExtractionRun.Status.RUNNING)


def renew(token: str) -> int:
    """Extend the lease of everything claimed with `token`; returns how many turns are
    still held (0: the claim lapsed and was taken over, or the work is finished)."""
    until = lease_until()
    ExtractionRun.objects.filter(claimed_by=token, status=ExtractionRun.Status.RUNNING).update(lease_until=until)
    return Turn.objects.filter(claimed_by=token, status=Turn.Status.PROCESSING).update(lease_until=until)


class _Heartbeat(threading.Thread):
    def __init__(self, tokens: tuple[str, ...]) -> None:
        super().__init__(name="claim-heartbeat", daemon=True)
        self.tokens = tokens
        self.stopped = threading.Event()

    def run(self) -> None:
        # Every third of a lease: two renewals can fail (a busy database) before it lapses.
        period = settings.MEMORY_CLAIM_LEASE_SECONDS / 3
        renewed = False
        try:
            while not self.stopped.wait(period):
                renewed = True
                for token in self.tokens:
                    try:
                        renew(token)
                    except Exception:  # a renewal missed is not fatal; the next may pass
                        log.warning("could not renew claim %s", token, exc_info=True)
        finally:
            if renewed:
                connections.close_all()  # this thread's own connections


@contextlib.contextmanager
def keep_alive(*tokens: str) -> Iterator[None]:
    """Renew the claims `tokens` in the background while the block runs (a model call
    can outlast a lease: timeout × retries)."""
    beat = _Heartbeat(tuple(t for t in tokens if t))
    beat.start()
    try:
        yield
    finally:
        beat.stopped.set()
        beat.join()
