"""Context preview: the exact text an agent would be given for a user, with its token
count, the facts left out and why, and a form to save the budgets tried as the agent's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.forms import AgentSettingsForm, PreviewForm
from dashboard.views.agents import saved_limits
from facts.errors import InvalidId
from facts.models import FactCard
from retrieval import render as renderer

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
        current = saved_limits(data["agent"])
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
        except InvalidId as exc:
            form.add_error("user", str(exc))
    if request.htmx and request.htmx.target == "preview-result":
        return render(request, "retrieval/preview.html#result", ctx)
    return render(request, "retrieval/preview.html", ctx)
