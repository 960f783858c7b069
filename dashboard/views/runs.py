"""Extraction runs: the list (by status, user, agent) and one run whole — what the
extractor was sent and answered, tokens and time, every candidate with its verdict —
with Retry for a failed run's turns."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.db.models import Count, Q
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from dashboard.forms.people import RetryForm
from dashboard.forms.reading import RunFilters
from dashboard.helpers import HtmxHttpRequest, audit, page_of, query_without_page
from facts import tasks
from facts.access import CURATE
from facts.judging.extraction import EXTRACTION_RULES, RULES_VERSION
from facts.models import AuditEvent, Candidate, ExtractionRun, FactCard, Turn

PAGE_SIZE = 50


def _run_or_404(pk: int) -> ExtractionRun:
    run = ExtractionRun.objects.filter(pk=pk).first()
    if run is None:
        raise Http404("no such run")
    return run


@require_GET
@login_required
def runs_list(request: HtmxHttpRequest) -> HttpResponse:
    form = RunFilters(request.GET)
    runs = ExtractionRun.objects.defer("filtered_rows", "request", "raw_output").order_by("-started_at", "-pk")
    number = None
    if form.is_valid():
        data = form.cleaned_data
        if data["status"]:
            runs = runs.filter(status=data["status"])
        if data["user"]:
            runs = runs.filter(user_id=data["user"])
        if data["agent"]:
            runs = runs.filter(agent_name=data["agent"])
        number = data.get("page")
    else:
        runs = runs.none()
    page = page_of(request, runs, number, PAGE_SIZE)
    # Verdict counts for the shown page only: an annotation would group every run's
    # candidates for the paginator's count too.
    counts = (
        Candidate.objects.filter(run_id__in=[run.pk for run in page])
        .values_list("run_id", "verdict")
        .annotate(n=Count("id"))
        .order_by()
    )
    by_run: dict[int, dict[str, int]] = {}
    for run_id, verdict, n in counts:
        by_run.setdefault(run_id, {})[verdict] = n
    for run in page:
        run.verdicts = by_run.get(run.pk, {})
    ctx = {"form": form, "page": page, "query": query_without_page(request.GET)}
    if request.htmx and request.htmx.target == "run-rows":
        return render(request, "dashboard/runs.html#rows", ctx)
    return render(request, "dashboard/runs.html", ctx)


def _pretty(value: Any) -> str:
    """JSON as a person reads it (the template escapes it)."""
    return json.dumps(value, ensure_ascii=False, indent=2)


def _sent(run: ExtractionRun) -> dict[str, Any] | None:
    """The run's request record, with the rules' text when they are still the ones it
    was sent (the record keeps only their version)."""
    record = run.request if isinstance(run.request, dict) else {}
    if not record:
        return None
    ids = [i for i in record.get("existing_fact_ids", []) if isinstance(i, str)]
    live = set(FactCard.objects.filter(id__in=ids).values_list("id", flat=True))
    return {
        "rules": EXTRACTION_RULES if record.get("rules_version") == RULES_VERSION else "",
        "rules_version": record.get("rules_version", ""),
        "profile_sections": record.get("profile_sections", []),
        "facts": [(i, i in live) for i in ids],
    }


@require_GET
@login_required
def runs_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    run = _run_or_404(pk)
    turns = Turn.objects.filter(Q(run=run) | Q(claimed_by=run.claimed_by) if run.claimed_by else Q(run=run)).defer(
        "messages"
    )
    waiting = Turn.objects.filter(user_id=run.user_id, agent_name=run.agent_name, thread_id=run.thread_id).filter(
        Q(status=Turn.Status.FAILED) | Q(status=Turn.Status.PENDING) & ~Q(error="")
    )
    ctx = {
        "run": run,
        "candidates": run.candidates.order_by("position", "pk"),
        "turns": turns.order_by("received_at", "pk")[:50],
        "sent": _sent(run),
        "raw": _pretty(run.raw_output) if run.raw_output is not None else "",
        "retryable": run.status == ExtractionRun.Status.FAILED and waiting.exists(),
        "later": ExtractionRun.objects.filter(
            user_id=run.user_id, agent_name=run.agent_name, thread_id=run.thread_id, pk__gt=run.pk
        )
        .order_by("pk")
        .first(),
        "retry_form": RetryForm(),
    }
    return render(request, "dashboard/run.html", ctx)


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def runs_retry(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    run = _run_or_404(pk)
    form = RetryForm(request.POST)
    form.is_valid()
    if run.status != ExtractionRun.Status.FAILED:
        messages.info(request, f"Run {pk} did not fail ({run.status}): there is nothing to retry.")
        return redirect("runs_detail", pk=pk)
    latest = ExtractionRun.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    count = tasks.retry_run(run)
    if not count:
        messages.info(request, f"Run {pk}'s turns are no longer waiting: a later run processed them.")
        return redirect("runs_detail", pk=pk)
    audit(
        request,
        AuditEvent.Action.RETRY_TURNS,
        target=f"run:{pk}",
        user_id=run.user_id,
        agent_name=run.agent_name,
        reason=form.cleaned_data.get("note", ""),
        count=count,
    )
    # The queue may have run it already (an immediate task backend): show that run.
    after = ExtractionRun.objects.filter(pk__gt=latest, user_id=run.user_id, agent_name=run.agent_name,
                                         thread_id=run.thread_id).order_by("pk").first()  # fmt: skip
    if after is not None:
        messages.success(request, f"Run {pk} was retried: this is the new run ({after.status}).")
        return redirect("runs_detail", pk=after.pk)
    messages.success(request, f"{count} turn(s) of run {pk} are queued for extraction again.")
    return redirect("runs_detail", pk=pk)
