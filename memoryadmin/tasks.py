"""Long work of the dashboard, run by the worker (`manage.py db_worker`)."""

from __future__ import annotations

import time
from typing import Any

from django.utils import timezone
from django_tasks import task

from facts.models import FactCard
from retrieval.models import IndexRebuild

from . import rebuild as rebuilder
from .models import DriftCheck

# Progress is written at most this often: the page polls, the row must not become the
# bottleneck of a 100k-file scan.
PROGRESS_EVERY_S = 0.3
MAX_LISTED = 200


def trimmed(report: dict[str, Any]) -> dict[str, Any]:
    """The check report with each id list cut to `MAX_LISTED` (the counts stay exact)."""
    out: dict[str, Any] = {}
    for name, value in report.items():
        if isinstance(value, dict):
            out[name] = {k: (v[:MAX_LISTED] if isinstance(v, list) else v) for k, v in value.items()}
        elif isinstance(value, list):
            out[name] = value[:MAX_LISTED]
        else:
            out[name] = value
    return out


def drift_counts(report: dict[str, Any]) -> dict[str, Any]:
    counts: dict[str, Any] = {}
    for name, value in report.items():
        if isinstance(value, dict):
            counts[name] = {k: len(v) for k, v in value.items() if isinstance(v, list)}
    counts["unreadable"] = len(report.get("unreadable", []))
    return counts


def record_check(check: DriftCheck, *, verify: bool = True) -> DriftCheck:
    started = time.monotonic()
    try:
        report = rebuilder.check(verify=verify)
    except Exception as exc:
        check.status = DriftCheck.Status.FAILED
        check.error = f"{exc.__class__.__name__}: {exc}"
        check.duration_s = time.monotonic() - started
        check.save(update_fields=["status", "error", "duration_s"])
        raise
    data = report.as_dict()
    check.status = DriftCheck.Status.DONE
    check.clean = report.clean
    check.report = trimmed(data)
    check.counts = drift_counts(data)
    check.files = FactCard.objects.count()
    check.duration_s = time.monotonic() - started
    check.save(update_fields=["status", "clean", "report", "counts", "files", "duration_s"])
    return check


@task()
def check_drift(check_id: int) -> str:
    check = DriftCheck.objects.get(pk=check_id)
    record_check(check)
    return check.status


@task()
def rebuild_index(rebuild_id: int) -> str:
    """Rebuild mirror and index from the files, reporting progress into the IndexRebuild row."""
    row = IndexRebuild.objects.get(pk=rebuild_id)
    started = time.monotonic()
    IndexRebuild.objects.filter(pk=row.pk).update(status=IndexRebuild.Status.RUNNING, started_at=timezone.now())
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if done >= total or now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            IndexRebuild.objects.filter(pk=row.pk).update(done=done, total=total)

    def phase(name: str) -> None:
        last[0] = 0.0  # the next step's first count is written at once
        IndexRebuild.objects.filter(pk=row.pk).update(phase=name)

    try:
        result = rebuilder.rebuild(progress=progress, actor=row.requested_by or "rebuild", phase=phase)
    except Exception as exc:
        IndexRebuild.objects.filter(pk=row.pk).update(
            status=IndexRebuild.Status.FAILED,
            error=f"{exc.__class__.__name__}: {exc}",
            finished_at=timezone.now(),
            duration_s=time.monotonic() - started,
        )
        raise
    row.refresh_from_db()
    row.status = IndexRebuild.Status.SUCCEEDED
    row.cards = result.cards
    row.profiles = result.profiles
    row.unreadable = [{"path": p, "error": e} for p, e in result.unreadable][:MAX_LISTED]
    row.done = max(row.done, row.total)
    row.finished_at = timezone.now()
    row.duration_s = time.monotonic() - started
    row.save(update_fields=["status", "cards", "profiles", "unreadable", "done", "finished_at", "duration_s"])
    # Index health on the overview comes from the latest check: refresh it now. The
    # cache was written by this rebuild: the check trusts it (the console's check button
    # verifies it), instead of tokenizing every card a second time.
    record_check(DriftCheck.objects.create(requested_by=row.requested_by or "rebuild"), verify=False)
    return row.status


@task()
def load_demo() -> str:
    """The demo conversations through the real pipeline (`manage.py bootstrap --queue-demo`,
    which `make run` uses: the server answers while the worker loads them)."""
    import io

    from facts import demo

    out = io.StringIO()
    demo.load_demo(out)
    return out.getvalue().strip()
