"""Projects: whose each project's shared memory is (its tenant, or shared), what it
holds and whose conversations wrote it; admins give a project to a tenant or share it
(`facts.tenancy`, audited)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from dashboard.forms.people import ProjectsFilter, ProjectTenancyForm
from dashboard.helpers import actor_of, page_of, query_without_page
from facts import tenancy
from facts.access import ADMINISTER


def _page(request: HttpRequest, form: ProjectTenancyForm | None = None, status: int = 200) -> HttpResponse:
    filters = ProjectsFilter(request.GET)
    data = filters.cleaned_data if filters.is_valid() else {}
    rows = tenancy.project_rows(data.get("q") or "")
    ctx = {
        "filters": filters,
        "page": page_of(request, rows, data.get("page")),
        "query": query_without_page(data),
        "form": form or ProjectTenancyForm(),
        "separator": tenancy.separator(),
    }
    return render(request, "dashboard/projects.html", ctx, status=status)


@require_GET
@login_required
def projects(request: HttpRequest) -> HttpResponse:
    return _page(request)


@login_required
@permission_required(ADMINISTER, raise_exception=True)
@require_POST
def project_settings(request: HttpRequest) -> HttpResponse:
    """Give a project to a tenant ("" for the users without one) or share it."""
    form = ProjectTenancyForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    data = form.cleaned_data
    done = tenancy.set_tenancy(
        data["project"], tenant=data["tenant"], shared=data["shared"], actor=actor_of(request), reason=data["reason"]
    )
    messages.success(request, f"Project {done.project_id}: {done.label}.")
    return redirect("projects")
