"""Dashboard pages of the read side: context preview and search playground."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from facts.access import ADMINISTER, CURATE
from facts.errors import InvalidId
from facts.models import AuditEvent, FactCard
from facts.views import audit

from .forms import AgentSettingsForm, GoldenCheckForm, GoldenForm, PreviewForm, SearchForm, settings_of
from .models import AgentSettings, GoldenQuery

EXCLUDED_REASONS = {
    "budget": "did not fit in the budget",
    "correction_budget": "did not fit in the correction budget",
    "top_n": "beyond the top_n cap",
    "expired": "expired",
}


@dataclass
class Listed:
    id: str
    card: FactCard | None
    reason: str = ""
    reason_text: str = ""


EXCLUDED_SHOWN = 100


def cards_by_id(ids: list[str]) -> dict[str, FactCard]:
    rows = FactCard.objects.filter(id__in=ids).only("id", "content", "category", "confidence")
    return {row.id: row for row in rows}


def preview_context(data: dict[str, Any]) -> dict[str, Any]:
    from . import render as renderer

    budgets = {k: data.get(k) for k in ("budget", "correction_budget", "top_n")}
    rendered = renderer.render_context(
        user_id=data["user"],
        agent_name=data["agent"],
        project_id=data.get("project") or None,
        mode=data.get("mode") or "auto",
        **{k: v for k, v in budgets.items() if v is not None},
    )
    excluded = list(rendered.excluded)
    # An agent with a thousand facts leaves most of them out: list the first ones (all on
    # request) and count every one by reason, so the page stays fast.
    shown = excluded if data.get("all_excluded") else excluded[:EXCLUDED_SHOWN]
    rows = cards_by_id(list(rendered.included) + [fact_id for fact_id, _ in shown])
    by_reason: dict[str, int] = {}
    for _, reason in excluded:
        by_reason[reason] = by_reason.get(reason, 0) + 1
    return {
        "rendered": rendered,
        "included": [Listed(i, rows.get(i)) for i in rendered.included],
        "excluded": [Listed(i, rows.get(i), r, EXCLUDED_REASONS.get(r, r)) for i, r in shown],
        "excluded_total": len(excluded),
        "excluded_by_reason": sorted(by_reason.items(), key=lambda item: -item[1]),
        "sections": dict(getattr(rendered, "sections", {}) or {}),
    }


@require_GET
@login_required
def context_preview(request: HttpRequest) -> HttpResponse:
    form = PreviewForm(request.GET if "user" in request.GET else None)
    ctx: dict[str, Any] = {"form": form}
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        current = settings_of(data["agent"])
        used = {k: data.get(k) if data.get(k) is not None else current[k] for k in current}
        ctx["used"] = used
        ctx["saved"] = current
        ctx["settings_form"] = AgentSettingsForm(initial={"agent": data["agent"], **used})
        try:
            ctx.update(preview_context(data))
            rendered = ctx["rendered"]
            # The limits the renderer actually applied (it clamps and fills in defaults).
            if getattr(rendered, "budget", 0):
                ctx["used"] = {k: getattr(rendered, k) for k in ("budget", "correction_budget", "top_n")}
        except ImportError:
            ctx["unavailable"] = "The context renderer (retrieval.render) is not installed yet."
        except InvalidId as exc:
            form.add_error("user", str(exc))
    if request.htmx and request.htmx.target == "preview-result":
        return render(request, "retrieval/preview.html#result", ctx)
    return render(request, "retrieval/preview.html", ctx)


def store_agent_settings(request: HttpRequest, data: dict[str, Any]) -> AgentSettings:
    """Save an agent's budgets (a settings change: audited with before and after)."""
    before = settings_of(data["agent"])
    row, _ = AgentSettings.objects.update_or_create(
        agent_name=data["agent"],
        defaults={"budget": data["budget"], "correction_budget": data["correction_budget"], "top_n": data["top_n"]},
    )
    after = {"budget": row.budget, "correction_budget": row.correction_budget, "top_n": row.top_n}
    audit(
        request,
        AuditEvent.Action.SETTINGS,
        target=f"agent:{row.agent_name}",
        agent_name=row.agent_name,
        reason=data.get("reason", ""),
        before=before,
        after=after,
    )
    return row


@login_required
@permission_required(ADMINISTER, raise_exception=True)
@require_POST
def save_agent_budgets(request: HttpRequest) -> HttpResponse:
    form = AgentSettingsForm(request.POST)
    back = request.POST.get("back", "")
    target = reverse("context_preview") + ("?" + back if back and not back.startswith(("/", "http")) else "")
    if not form.is_valid():
        messages.error(request, "Not saved: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
        return redirect(target)
    row = store_agent_settings(request, form.cleaned_data)
    messages.success(
        request,
        f"Saved as the settings of {row.agent_name}: budget {row.budget}, corrections {row.correction_budget}, top_n {row.top_n}.",
    )
    return redirect(target)


# --- search playground ------------------------------------------------------------------


def run_search(data: dict[str, Any], limit: int | None = None) -> list[Any]:
    from . import search as searcher

    return searcher.search(
        data["q"],
        user_id=data["user"],
        agent_name=data["agent"],
        project_id=data.get("project") or None,
        limit=limit or data.get("limit") or 5,
    )


@require_GET
@login_required
def search_playground(request: HttpRequest) -> HttpResponse:
    form = SearchForm(request.GET if "q" in request.GET else None)
    ctx: dict[str, Any] = {"form": form}
    agent = ""
    if form.is_bound and form.is_valid():
        agent = form.cleaned_data["agent"]
        try:
            ctx["hits"] = [(hit, hit.score - hit.confidence_part) for hit in run_search(form.cleaned_data)]
        except ImportError:
            ctx["unavailable"] = "The search (retrieval.search) is not installed yet."
        except InvalidId as exc:
            form.add_error("user", str(exc))
        ctx["query_string"] = urlencode({k: v for k, v in form.cleaned_data.items() if v not in (None, "")})
    golden = GoldenQuery.objects.order_by("agent_name", "query")
    if agent:
        golden = golden.filter(agent_name=agent)
    ctx["golden"] = golden[:200]
    if request.htmx and request.htmx.target == "search-result":
        return render(request, "retrieval/search.html#result", ctx)
    return render(request, "retrieval/search.html", ctx)


def check_golden(golden: GoldenQuery) -> GoldenQuery:
    """Run the saved query again; it passes when the expected ids lead the results in order."""
    data = {"q": golden.query, "user": golden.user_id, "agent": golden.agent_name, "project": golden.project_id}
    hits = run_search(data, limit=max(5, len(golden.expected_ids)))
    ids = [hit.id for hit in hits]
    golden.last_result_ids = ids
    golden.last_passed = ids[: len(golden.expected_ids)] == list(golden.expected_ids)
    golden.last_checked_at = timezone.now()
    golden.save(update_fields=["last_result_ids", "last_passed", "last_checked_at"])
    return golden


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def golden_save(request: HttpRequest) -> HttpResponse:
    form = GoldenForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not saved: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
        return redirect("search_playground")
    data = form.cleaned_data
    golden = GoldenQuery.objects.create(
        user_id=data["user"],
        agent_name=data["agent"],
        project_id=data.get("project", ""),
        query=data["q"],
        expected_ids=data["expected"],
        created_by=request.user,
    )
    messages.success(request, f"Saved “{golden.query}” as a golden query of {golden.agent_name}.")
    query = urlencode(
        {"q": data["q"], "user": data["user"], "agent": data["agent"], "project": data.get("project", "")}
    )
    return redirect(reverse("search_playground") + "?" + query)


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def golden_check(request: HttpRequest) -> HttpResponse:
    """Re-check one golden query (`pk` in the form) or every golden query of an agent."""
    form = GoldenCheckForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Nothing checked: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
        return redirect("search_playground")
    rows = GoldenQuery.objects.all()
    if form.cleaned_data.get("pk"):
        rows = rows.filter(pk=form.cleaned_data["pk"])
    elif form.cleaned_data.get("agent"):
        rows = rows.filter(agent_name=form.cleaned_data["agent"])
    checked = failed = 0
    try:
        for golden in rows[:200]:
            check_golden(golden)
            checked += 1
            failed += 0 if golden.last_passed else 1
    except ImportError:
        messages.error(request, "The search (retrieval.search) is not installed yet.")
        return redirect("search_playground")
    messages.success(
        request,
        f"Checked {checked} golden quer{'y' if checked == 1 else 'ies'}: {checked - failed} pass, {failed} fail.",
    )
    return redirect("search_playground")


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def golden_delete(request: HttpRequest, pk: int) -> HttpResponse:
    golden = GoldenQuery.objects.filter(pk=pk).first()
    if golden is None:
        raise Http404("no such golden query")
    golden.delete()
    messages.success(request, "Golden query deleted.")
    return redirect("search_playground")
