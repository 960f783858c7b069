"""People: who the memory is about, and forgetting them.

A person's page is `/users/<id>/` (users.py). Erasing a person (or one conversation, "Forget this conversation") goes through `facts.erasure`,
the same service as `manage.py erase`: a dry-run list first, then a typed confirmation
(the user id, or the thread id), admins only.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from dashboard.forms.common import UserIdForm
from dashboard.forms.people import EraseForm, ForgetThreadForm
from dashboard.helpers import actor_of, changed
from dashboard.views.users import user_or_404
from facts.access import ADMINISTER
from facts.erasure.guard import running_for
from facts.erasure.plan import plan
from facts.erasure.run import Report, erase
from facts.erasure.scope import Scope
from facts.models import FactCard
from facts.storage.errors import InvalidId, LockTimeout

SHOWN_IDS = 50


def person_url(user_id: str) -> str:
    return reverse("users_detail", args=[user_id])


@require_GET
@login_required
def people(request: HttpRequest) -> HttpResponse:
    """The old list of people: now `/users/` (kept so bookmarks still work)."""
    return redirect("users_list", permanent=True)


@require_GET
@login_required
def person(request: HttpRequest) -> HttpResponse:
    """The old person page (`?user=`): now `/users/<id>/`."""
    pick = UserIdForm(request.GET)
    if not pick.is_valid():
        return redirect("users_list")
    return redirect(person_url(pick.cleaned_data["user"]), permanent=True)


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
        return redirect("users_list")
    person = UserIdForm({"user": data.get("user", "")})
    if not person.is_valid():
        # Nothing is erased and nothing audited for an id memory holds nothing about.
        return render(request, "dashboard/no_person.html", {"form": person}, status=person.status)
    try:
        scope = Scope.of(person.cleaned_data["user"])
    except InvalidId as exc:
        messages.error(request, f"Not a valid user id: {exc}")
        return redirect("users_list")
    ctx = {"form": form, "scope": scope, "rows": _dry_run(scope), "running": running_for(scope.user_id)}
    if request.method == "GET":
        return render(request, "dashboard/erase.html", ctx)
    if not form.is_valid():
        return render(request, "dashboard/erase.html", ctx, status=400)
    report = _erase(request, scope)
    if report is None:
        return redirect(person_url(scope.user_id))
    total = sum(report.counts.values())
    messages.success(request, f"Erased user {scope.user_id}: {total} item(s) removed (erasure {report.erasure_id}).")
    return changed(redirect("users_list"))


@login_required
@require_http_methods(["GET", "POST"])
def forget_thread(request: HttpRequest) -> HttpResponse:
    """Forget one conversation: the same service, the same dry run, the thread id typed."""
    data = request.POST if request.method == "POST" else request.GET
    form = ForgetThreadForm(data if data else None)
    if not form.is_valid():
        status = 200 if request.method == "GET" and not form.is_bound else 400
        return render(request, "dashboard/forget.html", {"form": form, "rows": []}, status=status)
    clean = form.cleaned_data
    try:
        scope = Scope.of(clean["user"], clean["agent"], clean["thread"])
    except InvalidId as exc:
        form.add_error("user", str(exc))
        return render(request, "dashboard/forget.html", {"form": form, "rows": []}, status=400)
    cards = list(
        FactCard.objects.filter(source_thread_id=scope.thread_id, user_id=scope.user_id, agent_name=scope.agent_name)
        .order_by("created_at")
        .only("id", "key", "content", "status", "user_id", "agent_name", "project_id", "path")
    )
    ctx = {"form": form, "scope": scope, "cards": cards, "rows": _dry_run(scope)}
    if request.method == "GET":
        return render(request, "dashboard/forget.html", ctx)
    if not request.user.has_perm(ADMINISTER):
        raise PermissionDenied("Forgetting a conversation needs the admin role.")
    if (clean.get("confirm") or "").strip() != scope.thread_id:
        form.add_error("confirm", "Type the thread id to confirm.")
        return render(request, "dashboard/forget.html", ctx, status=400)
    report = _erase(request, scope)
    if report is None:
        query = {"user": scope.user_id, "agent": scope.agent_name, "thread": scope.thread_id}
        return redirect(reverse("forget_thread") + "?" + urlencode(query))
    messages.success(
        request,
        f"Forgot the conversation {scope.thread_id}: {report.counts.get('cards', 0)} card(s), "
        f"{report.counts.get('turns', 0)} turn(s), {report.counts.get('candidates', 0)} candidate(s) erased.",
    )
    try:
        user_or_404(scope.user_id)
    except Http404:  # that was all memory held about them: their page is gone too
        return changed(redirect("users_list"))
    return changed(redirect(person_url(scope.user_id)))
