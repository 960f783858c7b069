"""The team: the dashboard's own accounts (admins only).

An admin creates an account with a role (viewer, reviewer, admin: the groups of
`facts.access`), changes its role, deactivates or reactivates it, or gives it a new
set-password link. The new account has no password: the admin passes on a one-time link
(`memoryadmin.accounts`): one live link per account, a new one revokes the earlier one,
deactivation kills it for good, it expires after PASSWORD_RESET_TIMEOUT and its page
says when. Every change is audited.

An admin cannot change their own account here (no locking oneself out), and only a
superuser may change a superuser.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required, permission_required
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse, reverse_lazy
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dashboard.forms.people import AccountForm, AccountStateForm, RoleForm
from dashboard.helpers import actor_of, audit
from facts.access import ROLES, ensure_roles
from facts.models import AuditEvent
from memoryadmin import accounts
from memoryadmin.models import SetPasswordLink

ADMIN_ONLY = "facts.administer_memory"


def role_of(account: User) -> str:
    """The highest role among the account's groups ("" when it has none)."""
    names = {g.name for g in account.groups.all()}
    for role in reversed(list(ROLES)):
        if role in names:
            return role
    return ""


def _set_role(account: User, role: str) -> None:
    if not Group.objects.filter(name=role).exists():
        ensure_roles()
    # One role at a time: the other role groups go, groups of another purpose stay.
    account.groups.remove(*Group.objects.filter(name__in=list(ROLES)))
    account.groups.add(Group.objects.get(name=role))


@dataclass
class IssuedLink:
    url: str
    expires_at: datetime
    revoked_earlier: bool


def _set_password_link(request: HttpRequest, account: User, *, audit_it: bool = True) -> IssuedLink:
    uid, token, expires_at, revoked = accounts.issue(account, actor=actor_of(request), audit_it=audit_it)
    url = request.build_absolute_uri(reverse("team_set_password", args=[uid, token]))
    return IssuedLink(url, expires_at, revoked)


class SetPasswordView(auth_views.PasswordResetConfirmView):
    """The link's page: Django's form, with the account's one live link as the token
    check, its expiry shown, and the link spent (and audited) once the password is set."""

    token_generator = accounts.tokens
    template_name = "registration/set_password.html"
    success_url = reverse_lazy("team_password_set")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        link = accounts.live_link(self.user) if self.validlink else None
        ctx["expires_at"] = link.expires_at if link is not None else None
        return ctx

    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        if self.user is not None:  # a valid link names its account
            accounts.used(self.user)
        return response


def _changeable(request: HttpRequest, pk: int) -> User:
    """The account named in the URL, if this admin may change it."""
    account = get_object_or_404(User, pk=pk)
    if account.pk == request.user.pk:
        raise PermissionDenied("You cannot change your own account here.")
    if account.is_superuser and not request.user.is_superuser:
        raise PermissionDenied("Only a superuser can change a superuser's account.")
    return account


def _page(
    request: HttpRequest,
    form: AccountForm,
    status: int = 200,
    link: IssuedLink | None = None,
    linked: User | None = None,
) -> HttpResponse:
    people = User.objects.order_by("-is_active", "username").prefetch_related("groups")
    open_links = dict(
        SetPasswordLink.objects.filter(expires_at__gt=timezone.now()).values_list("account_id", "expires_at")
    )
    rows = [(a, role_of(a), open_links.get(a.pk)) for a in people]
    ctx = {
        "form": form,
        "rows": rows,
        "roles": list(ROLES),
        "link": link.url if link else "",
        "issued": link,
        "linked": linked,
    }
    return render(request, "dashboard/team.html", ctx, status=status)


@login_required
@permission_required(ADMIN_ONLY, raise_exception=True)
@require_GET
def team(request: HttpRequest) -> HttpResponse:
    return _page(request, AccountForm())


@login_required
@permission_required(ADMIN_ONLY, raise_exception=True)
@require_POST
def team_create(request: HttpRequest) -> HttpResponse:
    """Create an account with a role; the answer shows its set-password link once."""
    form = AccountForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    data = form.cleaned_data
    with transaction.atomic():
        account = User.objects.create_user(data["username"], data["email"])
        account.set_unusable_password()
        account.save(update_fields=["password"])
        _set_role(account, data["role"])
        audit(request, AuditEvent.Action.TEAM, target=account.username, change="create", role=data["role"])
        # The creation's audit entry stands for its first link.
        link = _set_password_link(request, account, audit_it=False)
    messages.success(request, f"Account {account.username} created as {data['role']}.")
    return _page(request, AccountForm(), link=link, linked=account)


@login_required
@permission_required(ADMIN_ONLY, raise_exception=True)
@require_POST
def team_role(request: HttpRequest, pk: int) -> HttpResponse:
    account = _changeable(request, pk)
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose a role: " + ", ".join(ROLES) + ".")
        return redirect("team")
    before = role_of(account)
    role = form.cleaned_data["role"]
    if role != before:
        with transaction.atomic():
            _set_role(account, role)
            audit(request, AuditEvent.Action.TEAM, target=account.username, change="role", role=role, before=before)
        messages.success(request, f"{account.username} is now {role}.")
    return redirect("team")


@login_required
@permission_required(ADMIN_ONLY, raise_exception=True)
@require_POST
def team_active(request: HttpRequest, pk: int) -> HttpResponse:
    """Deactivate (or reactivate) an account. A deactivated account's open sessions end
    at their next request: Django's backend refuses inactive users."""
    account = _changeable(request, pk)
    form = AccountStateForm(request.POST)
    if not form.is_valid():
        return redirect("team")
    active = form.cleaned_data["active"]
    if active != account.is_active:
        with transaction.atomic():
            if not active:
                # Dead for good: reactivating the account does not bring its link back.
                accounts.revoke(account, actor=actor_of(request), why="deactivated")
            account.is_active = active
            account.save(update_fields=["is_active"])
            change = "activate" if active else "deactivate"
            audit(request, AuditEvent.Action.TEAM, target=account.username, change=change)
        messages.success(request, f"{account.username} {'reactivated' if active else 'deactivated'}.")
    return redirect("team")


@login_required
@permission_required(ADMIN_ONLY, raise_exception=True)
@require_POST
def team_link(request: HttpRequest, pk: int) -> HttpResponse:
    """A new one-time set-password link (a lost invitation or a forgotten password)."""
    account = _changeable(request, pk)
    if not account.is_active:
        messages.error(request, f"{account.username} is deactivated: reactivate the account first.")
        return redirect("team")
    return _page(request, AccountForm(), link=_set_password_link(request, account), linked=account)
