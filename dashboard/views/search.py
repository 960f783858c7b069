"""Search playground: run an agent's search by hand with each hit's score broken into
its parts, and golden queries (saved searches whose expected top results are re-checked
after edits, checked by `retrieval.golden`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from dashboard.forms.reading import GoldenCheckForm, GoldenForm, SearchForm
from dashboard.helpers import HtmxHttpRequest, flash_errors
from facts.access import CURATE
from facts.storage.errors import InvalidId
from retrieval import search as searcher
from retrieval.golden import check_golden
from retrieval.models import GoldenQuery


def run_search(data: dict[str, Any], limit: int | None = None) -> list[Any]:
    return searcher.search(
        data["q"],
        user_id=data["user"],
        agent_name=data["agent"],
        project_id=data.get("project") or None,
        limit=limit or data.get("limit") or 5,
    )


@require_GET
@login_required
def search_playground(request: HtmxHttpRequest) -> HttpResponse:
    form = SearchForm(request.GET if "q" in request.GET else None)
    ctx: dict[str, Any] = {"form": form}
    agent = ""
    if form.is_bound and form.is_valid():
        agent = form.cleaned_data["agent"]
        try:
            ctx["hits"] = [(hit, hit.score - hit.confidence_part) for hit in run_search(form.cleaned_data)]
        except InvalidId as exc:
            form.add_error("user", str(exc))
        ctx["query_string"] = urlencode({k: v for k, v in form.cleaned_data.items() if v not in (None, "")})
    golden = GoldenQuery.objects.order_by("agent_name", "query")
    if agent:
        golden = golden.filter(agent_name=agent)
    ctx["golden"] = golden[:200]
    if request.htmx and request.htmx.target == "search-result":
        return render(request, "dashboard/search.html#result", ctx)
    return render(request, "dashboard/search.html", ctx)


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def golden_save(request: HtmxHttpRequest) -> HttpResponse:
    form = GoldenForm(request.POST)
    if not form.is_valid():
        flash_errors(request, "Not saved:", form)
        return redirect("search_playground")
    data = form.cleaned_data
    golden = GoldenQuery.objects.create(
        user_id=data["user"],
        agent_name=data["agent"],
        project_id=data.get("project", ""),
        query=data["q"],
        expected_ids=data["expected"],
        created_by=request.user if request.user.is_authenticated else None,
    )
    messages.success(request, f"Saved “{golden.query}” as a golden query of {golden.agent_name}.")
    query = urlencode(
        {"q": data["q"], "user": data["user"], "agent": data["agent"], "project": data.get("project", "")}
    )
    return redirect(reverse("search_playground") + "?" + query)


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def golden_check(request: HtmxHttpRequest) -> HttpResponse:
    """Re-check one golden query (`pk` in the form) or every golden query of an agent."""
    form = GoldenCheckForm(request.POST)
    if not form.is_valid():
        flash_errors(request, "Nothing checked:", form)
        return redirect("search_playground")
    rows = GoldenQuery.objects.all()
    if form.cleaned_data.get("pk"):
        rows = rows.filter(pk=form.cleaned_data["pk"])
    elif form.cleaned_data.get("agent"):
        rows = rows.filter(agent_name=form.cleaned_data["agent"])
    checked = failed = 0
    for golden in rows[:200]:
        check_golden(golden)
        checked += 1
        failed += 0 if golden.last_passed else 1
    messages.success(
        request,
        f"Checked {checked} golden quer{'y' if checked == 1 else 'ies'}: {checked - failed} pass, {failed} fail.",
    )
    return redirect("search_playground")


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def golden_delete(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    golden = GoldenQuery.objects.filter(pk=pk).first()
    if golden is None:
        raise Http404("no such golden query")
    golden.delete()
    messages.success(request, "Golden query deleted.")
    return redirect("search_playground")
