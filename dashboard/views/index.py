"""Index console: the latest drift checks and rebuilds of the search index, and the
curator's "check drift" and "rebuild" actions (queued as tasks, progress polled by htmx)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from dashboard.forms.people import ReasonOnly
from dashboard.helpers import HtmxHttpRequest, audit
from dashboard.views.overview import index_health
from facts.access import CURATE
from facts.models import AuditEvent
from memoryadmin import tasks
from memoryadmin.models import DriftCheck
from retrieval.models import IndexRebuild


@require_GET
@login_required
def index_console(request: HtmxHttpRequest) -> HttpResponse:
    ctx = {
        **index_health(),
        "rebuilds": IndexRebuild.objects.order_by("-created_at")[:10],
        "checks": DriftCheck.objects.order_by("-created_at").defer("report")[:10],
    }
    return render(request, "dashboard/search_index.html", ctx)


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def index_check(request: HtmxHttpRequest) -> HttpResponse:
    check = DriftCheck.objects.create(requested_by=request.user.get_username())
    try:
        tasks.check_drift.enqueue(check.pk)
    except Exception as exc:  # the immediate backend runs it here and re-raises nothing useful to the user
        messages.error(request, f"The check failed: {exc}")
    return redirect("index_console")


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def index_rebuild(request: HtmxHttpRequest) -> HttpResponse:
    running = IndexRebuild.objects.filter(status__in=[IndexRebuild.Status.QUEUED, IndexRebuild.Status.RUNNING]).first()
    if running is not None:
        messages.info(request, "A rebuild is already under way.")
        return redirect("rebuild_progress", pk=running.pk)
    form = ReasonOnly(request.POST)
    form.is_valid()
    row = IndexRebuild.objects.create(requested_by=request.user.get_username())
    audit(request, AuditEvent.Action.REBUILD, target=f"rebuild:{row.pk}", reason=form.cleaned_data.get("reason", ""))
    tasks.rebuild_index.enqueue(row.pk)
    return redirect("rebuild_progress", pk=row.pk)


@require_GET
@login_required
def rebuild_progress(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    row = IndexRebuild.objects.filter(pk=pk).first()
    if row is None:
        raise Http404("no such rebuild")
    finished = row.status in (IndexRebuild.Status.SUCCEEDED, IndexRebuild.Status.FAILED)
    percent = (
        100
        if finished and row.status == IndexRebuild.Status.SUCCEEDED
        else (100 * row.done // row.total if row.total else 0)
    )
    ctx = {"row": row, "finished": finished, "percent": percent}
    if request.htmx:
        return render(request, "dashboard/rebuild.html#progress", ctx)
    return render(request, "dashboard/rebuild.html", ctx)
