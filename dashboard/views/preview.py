"""Context preview: the exact text an agent would be given for a user, with its token
count, the facts left out and why, and a form to save the budgets tried as the agent's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import HttpResponse, QueryDict
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.forms.reading import AgentSettingsForm, PreviewForm
from dashboard.helpers import HtmxHttpRequest
from dashboard.views.agents import saved_limits
from facts.enums import CardStatus, Category
from facts.models import FactCard
from facts.storage.errors import InvalidId
from retrieval import render as renderer

# The renderer's reason codes as a curator reads them (the code itself stays in a title).
EXCLUDED_REASONS = {
    renderer.BUDGET: "over the total token budget",
    renderer.CORRECTION_BUDGET: "over the correction budget",
    renderer.TOP_N: "beyond the fact cap (top_n)",
    renderer.EXPIRED: "past its expiry date",
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


def busiest_user(agent: str) -> str:
    """The user with the most live facts for `agent`: whom an agent's "preview…" link shows."""
    row = (
        FactCard.objects.filter(agent_name=agent, status=CardStatus.ACTIVE)
        .exclude(user_id="")
        .values("user_id")
        .annotate(n=Count("id"))
        .order_by("-n", "user_id")
        .first()
    )
    return row["user_id"] if row else ""


def busiest_agent(user_id: str) -> str:
    """The agent holding most of `user_id`'s live facts: what a profile's preview link shows."""
    row = (
        FactCard.objects.filter(user_id=user_id, status=CardStatus.ACTIVE)
        .values("agent_name")
        .annotate(n=Count("id"))
        .order_by("-n", "agent_name")
        .first()
    )
    return row["agent_name"] if row else ""


def completed_link(query: QueryDict) -> tuple[QueryDict | None, str]:
    """The preview's parameters, with the half a link left out filled in.

    Links from other pages name only the agent (Agents & keys) or only the user (a
    profile); the other half is the one with the most facts, said in a note so the
    curator knows it was picked. A field the curator submitted empty stays empty (and
    is reported by the form). Returns (data to bind, or None for a blank form; note).
    """
    if "user" not in query and "agent" not in query:
        return None, ""
    if "user" in query and "agent" in query:
        return query, ""
    data = query.copy()
    note = ""
    if "user" not in query:
        data["user"] = busiest_user(query.get("agent", ""))
        if data["user"]:
            note = f"Showing {data['user']}, the user with the most facts for this agent: pick another above."
    elif "agent" not in query:
        data["agent"] = busiest_agent(query.get("user", ""))
        if data["agent"]:
            note = f"Showing {data['agent']}, the agent holding most of this user's facts: pick another above."
    if not data["user"] or not data["agent"]:
        # Nothing to fill it with: a form with what is known, and no error before any action.
        return None, ""
    return data, note


def correction_room(rendered: renderer.Rendered) -> int:
    """Tokens corrections could take: their own budget caps them, but they come after
    the profile inside the total budget, so what the profile used is not theirs."""
    sections = getattr(rendered, "sections", {}) or {}
    before = rendered.tokens - sections.get("corrections", 0) - sections.get("facts", 0)
    return max(0, min(rendered.correction_budget, rendered.budget - before))


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
        label = EXCLUDED_REASONS.get(reason, reason)
        by_reason[label] = by_reason.get(label, 0) + 1
    room = correction_room(rendered)
    listed = []
    for fact_id, reason in shown:
        card = rows.get(fact_id)
        text = EXCLUDED_REASONS.get(reason, reason)
        if reason == renderer.BUDGET and card is not None and card.category == Category.CORRECTION:
            # The puzzle curators hit: a correction cut by the budget although the
            # correction budget is larger. Say where its tokens went.
            text += (
                f": the profile is placed first, leaving {room} tokens for corrections"
                f" (the correction budget, {rendered.correction_budget}, is a cap inside the total,"
                " not extra room)"
            )
        listed.append(Listed(fact_id, card, reason, text))
    return {
        "rendered": rendered,
        "included": [Listed(i, rows.get(i)) for i in rendered.included],
        "excluded": listed,
        "excluded_total": len(excluded),
        "excluded_by_reason": sorted(by_reason.items(), key=lambda item: -item[1]),
        "sections": dict(getattr(rendered, "sections", {}) or {}),
        "correction_room": room,
    }


@require_GET
@login_required
def context_preview(request: HtmxHttpRequest) -> HttpResponse:
    data, note = completed_link(request.GET)
    form = PreviewForm(data, initial={k: v for k, v in request.GET.items() if k in ("user", "agent", "project")})
    ctx: dict[str, Any] = {"form": form, "picked_note": note}
    if form.is_bound and form.is_valid():
        cleaned: dict[str, Any] = form.cleaned_data
        current = saved_limits(cleaned["agent"])
        used = {k: cleaned.get(k) if cleaned.get(k) is not None else current[k] for k in current}
        ctx["used"] = used
        ctx["saved"] = current
        ctx["settings_form"] = AgentSettingsForm(initial={"agent": cleaned["agent"], **used})
        try:
            ctx.update(preview_context(cleaned))
            rendered = ctx["rendered"]
            # The limits the renderer actually applied (it clamps and fills in defaults).
            if getattr(rendered, "budget", 0):
                ctx["used"] = {k: getattr(rendered, k) for k in ("budget", "correction_budget", "top_n")}
        except InvalidId as exc:
            form.add_error("user", str(exc))
    # The form asks for the whole page region (its errors and the result change together);
    # the result alone refreshes itself when facts change.
    if request.htmx and request.htmx.target == "preview-result":
        return render(request, "dashboard/preview.html#result", ctx)
    return render(request, "dashboard/preview.html", ctx)
