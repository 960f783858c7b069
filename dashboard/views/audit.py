"""Audit log: every recorded change, filtered by action, actor, user, agent, target and
day, newest first."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.forms.common import day_end, day_start
from dashboard.forms.reading import AuditFilters
from dashboard.helpers import HtmxHttpRequest, page_of, query_without_page
from facts.models import AuditEvent


@require_GET
@login_required
def audit_log(request: HtmxHttpRequest) -> HttpResponse:
    form = AuditFilters(request.GET)
    rows = AuditEvent.objects.none()
    query = ""
    number = None
    if form.is_valid():
        data = form.cleaned_data
        rows = AuditEvent.objects.all()
        for name, field in (
            ("action", "action"),
            ("actor", "actor"),
            ("user", "user_id"),
            ("agent", "agent_name"),
            ("target", "target"),
        ):
            if data.get(name):
                rows = rows.filter(**{field: data[name]})
        if data.get("since"):
            rows = rows.filter(created_at__gte=day_start(data["since"]))
        if data.get("until"):
            rows = rows.filter(created_at__lte=day_end(data["until"]))
        rows = rows.order_by("-created_at", "-id")
        query = query_without_page(data)
        number = data.get("page")
    ctx = {"form": form, "page": page_of(request, rows, number), "query": query}
    if request.htmx and request.htmx.target == "audit-rows":
        return render(request, "dashboard/audit.html#rows", ctx)
    return render(request, "dashboard/audit.html", ctx)
