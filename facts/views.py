"""Dashboard pages of the write side."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from .enums import CardStatus
from .models import FactCard, ProfileSection


def overview_counts() -> dict[str, int]:
    by_status = dict(FactCard.objects.values_list("status").annotate(n=Count("id")).order_by())
    users = set(FactCard.objects.exclude(user_id="").values_list("user_id", flat=True).distinct())
    users |= set(ProfileSection.objects.values_list("user_id", flat=True).distinct())
    agents = FactCard.objects.exclude(agent_name="").values("agent_name").distinct().count()
    projects = FactCard.objects.exclude(project_id="").values("project_id").distinct().count()
    return {
        "users": len(users),
        "agents": agents,
        "projects": projects,
        "active": by_status.get(CardStatus.ACTIVE.value, 0),
        "expired": by_status.get(CardStatus.EXPIRED.value, 0),
        "superseded": by_status.get(CardStatus.SUPERSEDED.value, 0),
    }


@require_GET
@login_required
def overview(request: HttpRequest) -> HttpResponse:
    return render(request, "facts/overview.html", {"counts": overview_counts()})
