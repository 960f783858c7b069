"""Turns that need a person: failed extraction (attempts ran out) or stuck in processing
past their claim's lease (the worker died), with the error and a Retry action."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dashboard.forms.common import PageForm
from dashboard.forms.people import RetryForm
from dashboard.helpers import HtmxHttpRequest, audit, changed, page_of
from facts import tasks
from facts.access import CURATE
from facts.intake import claims
from facts.models import AuditEvent, ExtractionRun, Turn

PAGE_SIZE = 50


def problem_turns() -> QuerySet[Turn]:
    """Failed turns and turns stuck in processing past their lease, oldest first."""
    stuck = Q(claims.lapsed(timezone.now()), status=Turn.Status.PROCESSING)
    # A failed attempt leaves `Turn.run` empty (the turn was not processed), so the run
    # page it links to is its thread's latest run: the one that failed or was abandoned.
    last_run = ExtractionRun.objects.filter(
        user_id=OuterRef("user_id"), agent_name=OuterRef("agent_name"), thread_id=OuterRef("thread_id")
    ).order_by("-pk")
    return (
        Turn.objects.filter(Q(status=Turn.Status.FAILED) | stuck)
        .defer("messages")
        .annotate(last_run_id=Subquery(last_run.values("pk")[:1]))
        .order_by("received_at", "pk")
    )


def _context(request: HtmxHttpRequest) -> dict[str, Any]:
    form = PageForm(request.GET)
    number = form.cleaned_data.get("page") if form.is_valid() else None
    return {"page": page_of(request, problem_turns(), number, PAGE_SIZE), "query": ""}


def _answer(request: HtmxHttpRequest) -> HttpResponse:
    """htmx: the refreshed table (and a `turnsChanged` event); otherwise back to the page."""
    if request.htmx:
        response = render(request, "dashboard/turns.html#rows", _context(request))
        return changed(response, "turnsChanged")
    return redirect("turn_problems")


@require_GET
@login_required
def turn_problems(request: HtmxHttpRequest) -> HttpResponse:
    ctx = _context(request)
    if request.htmx and request.htmx.target == "turn-rows":
        return render(request, "dashboard/turns.html#rows", ctx)
    return render(request, "dashboard/turns.html", ctx)


@require_GET
@login_required
def turn_badge(request: HtmxHttpRequest) -> HttpResponse:
    """The count in the navigation; refreshed by the `turnsChanged` event."""
    return render(request, "dashboard/turns.html#badge", {"problem_count": problem_turns().count()})


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def turn_retry(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    turn = Turn.objects.filter(pk=pk).defer("messages").first()
    if turn is None:
        raise Http404("no such turn")
    form = RetryForm(request.POST)
    form.is_valid()
    if not problem_turns().filter(pk=pk).exists():
        messages.info(request, f"Turn {pk} is no longer failed or stuck ({turn.status}).")
        return _answer(request)
    count = tasks.retry_failed(ids=[pk])
    audit(
        request,
        AuditEvent.Action.RETRY_TURNS,
        target=f"turn:{pk}",
        user_id=turn.user_id,
        agent_name=turn.agent_name,
        reason=form.cleaned_data.get("note", ""),
        turns=[pk],
        was=turn.status,
    )
    messages.success(request, f"Turn {pk} is queued for extraction again." if count else f"Turn {pk} was not retried.")
    return _answer(request)


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def turn_retry_all(request: HtmxHttpRequest) -> HttpResponse:
    form = RetryForm(request.POST)
    form.is_valid()
    ids = list(problem_turns().values_list("pk", flat=True))
    if not ids:
        messages.info(request, "No turn is failed or stuck.")
        return _answer(request)
    count = tasks.retry_failed(ids=ids)
    audit(
        request,
        AuditEvent.Action.RETRY_TURNS,
        target="turns:all",
        reason=form.cleaned_data.get("note", ""),
        turns=ids[:1000],
        count=count,
    )
    messages.success(request, f"{count} turn(s) queued for extraction again.")
    return _answer(request)
