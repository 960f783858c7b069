"""Agents and API keys: each agent's context budgets (one form, saved by one endpoint
from this page or from the context preview) and the API keys agents use (issued once,
revoked, both audited)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from dashboard.confirm import confirm_first
from dashboard.forms.people import ApiKeyForm
from dashboard.forms.reading import AgentSettingsForm
from dashboard.helpers import audit, flash_errors
from facts.access import ADMINISTER
from facts.models import AuditEvent, FactCard
from memoryadmin.models import ApiKey
from retrieval.models import AgentSettings
from retrieval.render import limits_for


def saved_limits(agent: str) -> dict[str, int]:
    """The agent's budgets as the renderer applies them: its settings row, else the
    project's settings."""
    return asdict(limits_for(agent))


def known_agents() -> list[str]:
    names = set(AgentSettings.objects.values_list("agent_name", flat=True))
    names |= set(FactCard.objects.exclude(agent_name="").values_list("agent_name", flat=True).distinct()[:500])
    return sorted(names)


@require_GET
@login_required
def agents(request: HttpRequest) -> HttpResponse:
    rows = []
    for name in known_agents():
        current = saved_limits(name)
        rows.append(
            {"name": name, **current, "form": AgentSettingsForm(initial={"agent": name, **current}, prefix=name)}
        )
    ctx = {
        "agents": rows,
        "keys": ApiKey.objects.order_by("-created_at")[:200],
        "key_form": ApiKeyForm(),
        "new_agent": AgentSettingsForm(prefix="new"),
    }
    return render(request, "dashboard/agents.html", ctx)


def store_agent_settings(request: HttpRequest, data: dict[str, Any]) -> AgentSettings:
    """Save an agent's budgets (a settings change: audited with before and after)."""
    before = saved_limits(data["agent"])
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
def agent_settings(request: HttpRequest) -> HttpResponse:
    """Save an agent's budgets. The agents page posts one prefixed form per agent; the
    context preview posts an unprefixed one with `back`, its query, to return to it."""
    prefix = request.POST.get("prefix", "")
    form = AgentSettingsForm(request.POST, prefix=prefix or None)
    back = request.POST.get("back", "")
    target = reverse("agents")
    if "back" in request.POST:
        # Only a query string: `back` never names another page or site.
        target = reverse("context_preview") + ("?" + back if back and not back.startswith(("/", "http")) else "")
    if not form.is_valid():
        flash_errors(request, "Not saved:", form)
        return redirect(target)
    row = store_agent_settings(request, form.cleaned_data)
    messages.success(
        request,
        f"Saved as the settings of {row.agent_name}: budget {row.budget}, corrections {row.correction_budget}, top_n {row.top_n}.",
    )
    return redirect(target)


@login_required
@permission_required(ADMINISTER, raise_exception=True)
@require_POST
def api_key_create(request: HttpRequest) -> HttpResponse:
    form = ApiKeyForm(request.POST)
    if not form.is_valid():
        flash_errors(request, "No key created:", form)
        return redirect("agents")
    key, raw = ApiKey.issue(
        form.cleaned_data["name"],
        allowed_agents=form.cleaned_data["allowed_agents"],
        allowed_users=form.cleaned_data["allowed_users"],
        created_by=request.user.get_username(),
    )
    audit(
        request,
        AuditEvent.Action.API_KEY,
        target=f"key:{key.pk}",
        reason="created",
        name=key.name,
        prefix=key.prefix,
        allowed_agents=key.allowed_agents,
        allowed_users=key.allowed_users,
    )
    # Shown once, in this response only: the database keeps the hash.
    response = render(request, "dashboard/key_created.html", {"key": key, "raw": raw})
    response["Cache-Control"] = "no-store"
    return response


@login_required
@permission_required(ADMINISTER, raise_exception=True)
@require_POST
def api_key_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    key = ApiKey.objects.filter(pk=pk).first()
    if key is None:
        raise Http404("no such key")
    if key.active:
        asked = confirm_first(
            request,
            question=f"Revoke the key {key.name} ({key.prefix}…)? Agents using it are refused at once.",
            button="Revoke the key",
            cancel=reverse("agents"),
        )
        if asked:
            return asked
        key.revoke()
        audit(
            request,
            AuditEvent.Action.API_KEY,
            target=f"key:{key.pk}",
            reason="revoked",
            name=key.name,
            prefix=key.prefix,
        )
        messages.success(request, f"Key {key.name} revoked.")
    return redirect("agents")
