"""People: who the memory is about, and forgetting them.

A person's page lists their agents, fact counts, conversations and profile. Erasing a
person (or one conversation, "Forget this conversation") goes through `facts.erasure`,
the same service as `manage.py erase`: a dry-run list first, then a typed confirmation
(the user id, or the thread id), admins only.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.db.models import Count, Max, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from dashboard.forms import EraseForm, ForgetThreadForm, PageForm, UserPick
from dashboard.helpers import actor_of, changed, page_of
from facts.access import ADMINISTER
from facts.erasure.guard import running_for
from facts.erasure.plan import plan
from facts.erasure.run import Report, erase
from facts.erasure.scope import Scope
from facts.errors import InvalidId, LockTimeout
from facts.models import FactCard, ProfileSection, Turn

SHOWN_IDS = 50


@dataclass
class AgentRow:
    agent_name: str
    active: int
    total: int


def _people_ids() -> list[str]:
    ids = set(FactCard.objects.exclude(user_id="").values_list("user_id", flat=True).distinct())
    ids |= set(Turn.objects.values_list("user_id", flat=True).distinct())
    ids |= set(ProfileSection.objects.values_list("user_id", flat=True).distinct())
    return sorted(ids)


def person_url(user_id: str) -> str:
    return reverse("person") + "?" + urlencode({"user": user_id})


@require_GET
@login_required
def people(request: HttpRequest) -> HttpResponse:
    """Everyone the memory holds something about (cards, turns or a profile)."""
    paging = PageForm(request.GET)
    page = page_of(request, _people_ids(), paging.cleaned_data.get("page") if paging.is_valid() else 1)
    return render(request, "facts/people.html", {"page": page, "pick": UserPick()})


@require_GET
@login_required
def person(request: HttpRequest) -> HttpResponse:
    """One person: agents with fact counts, conversations, profile, and the erase action.
    The id travels in the query string: ids may hold `/`, `?` or `#`."""
    pick = UserPick(request.GET)
    if not pick.is_valid():
        return redirect("people")
    user_id = pick.cleaned_data["user"]
    agents = [
        AgentRow(row["agent_name"], row["active"], row["total"])
        for row in FactCard.objects.filter(user_id=user_id)
        .values("agent_name")
        .annotate(total=Count("id"), active=Count("id", filter=Q(status="active")))
        .order_by("agent_name")
    ]
    threads = list(
        Turn.objects.filter(user_id=user_id)
        .values("agent_name", "thread_id")
        .annotate(turns=Count("id"), last=Max("received_at"))
        .order_by("-last")[:200]
    )
    per_thread = {
        (row["agent_name"], row["source_thread_id"]): row["n"]
        for row in FactCard.objects.filter(user_id=user_id)
        .values("agent_name", "source_thread_id")
        .annotate(n=Count("id"))
        .order_by()
    }
    for thread in threads:
        thread["cards"] = per_thread.get((thread["agent_name"], thread["thread_id"]), 0)
    ctx = {
        "user_id": user_id,
        "agents": agents,
        "threads": threads,
        "projects": sorted(
            set(Turn.objects.filter(user_id=user_id).exclude(project_id="").values_list("project_id", flat=True))
        ),
        "has_profile": ProfileSection.objects.filter(user_id=user_id).exists(),
        "running": running_for(user_id),
    }
    return render(request, "facts/person.html", ctx)


def _dry_run(scope: Scope) -> list[tuple[str, int, list[str]]]:
    found = plan(scope)
    return [(kind, len(ids), [str(i) for i in ids[:SHOWN_IDS]]) for kind, ids in found.items().items()]


def _erase(request: HttpRequest, scope: Scope) -> Report | None:
    try:
        return erase(scope, actor=actor_of(request))
    except LockTimeout as exc:
        messages.error(request, f"Not finished: {exc}. Nothing new is accepted for this user; run it again.")
        return None


@login_required
@permission_required(ADMINISTER, raise_exception=True)
@require_http_methods(["GET", "POST"])
def person_erase(request: HttpRequest) -> HttpResponse:
    """Erase a person: GET shows what would go; POST with the user id typed erases it."""
    data = request.POST if request.method == "POST" else request.GET
    form = EraseForm(request.POST) if request.method == "POST" else EraseForm()
    if "user" not in data:
        return redirect("people")
    try:
        scope = Scope.of(data.get("user", ""))
    except InvalidId as exc:
        messages.error(request, f"Not a valid user id: {exc}")
        return redirect("people")
    ctx = {"form": form, "scope": scope, "rows": _dry_run(scope), "running": running_for(scope.user_id)}
    if request.method == "GET":
        return render(request, "facts/erase.html", ctx)
    if not form.is_valid():
        return render(request, "facts/erase.html", ctx, status=400)
    report = _erase(request, scope)
    if report is None:
        return redirect(person_url(scope.user_id))
    total = sum(report.counts.values())
    messages.success(request, f"Erased user {scope.user_id}: {total} item(s) removed (erasure {report.erasure_id}).")
    return changed(redirect("people"))


@login_required
@require_http_methods(["GET", "POST"])
def forget_thread(request: HttpRequest) -> HttpResponse:
    """Forget one conversation: the same service, the same dry run, the thread id typed."""
    data = request.POST if request.method == "POST" else request.GET
    form = ForgetThreadForm(data if data else None)
    if not form.is_valid():
        status = 200 if request.method == "GET" and not form.is_bound else 400
        return render(request, "facts/forget.html", {"form": form, "rows": []}, status=status)
    clean = form.cleaned_data
    try:
        scope = Scope.of(clean["user"], clean["agent"], clean["thread"])
    except InvalidId as exc:
        form.add_error("user", str(exc))
        return render(request, "facts/forget.html", {"form": form, "rows": []}, status=400)
    cards = list(
        FactCard.objects.filter(source_thread_id=scope.thread_id, user_id=scope.user_id, agent_name=scope.agent_name)
        .order_by("created_at")
        .only("id", "key", "content", "status", "user_id", "agent_name", "project_id", "path")
    )
    ctx = {"form": form, "scope": scope, "cards": cards, "rows": _dry_run(scope)}
    if request.method == "GET":
        return render(request, "facts/forget.html", ctx)
    if not request.user.has_perm(ADMINISTER):
        return HttpResponse("Forgetting a conversation needs the admin role.", status=403)
    if (clean.get("confirm") or "").strip() != scope.thread_id:
        form.add_error("confirm", "Type the thread id to confirm.")
        return render(request, "facts/forget.html", ctx, status=400)
    report = _erase(request, scope)
    if report is None:
        query = {"user": scope.user_id, "agent": scope.agent_name, "thread": scope.thread_id}
        return redirect(reverse("forget_thread") + "?" + urlencode(query))
    messages.success(
        request,
        f"Forgot the conversation {scope.thread_id}: {report.counts.get('cards', 0)} card(s), "
        f"{report.counts.get('turns', 0)} turn(s), {report.counts.get('candidates', 0)} candidate(s) erased.",
    )
    return changed(redirect(person_url(scope.user_id)))
