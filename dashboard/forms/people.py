"""The forms of the pages about people and access: forgetting and erasing a person,
picking one, dashboard accounts and roles, API keys, projects and their tenants, and
retrying turns."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.models import User
from django.contrib.auth.validators import UnicodeUsernameValidator

from dashboard.forms.common import AgentPicker, UserPicker, clean_agent, clean_person
from memoryadmin.models import parse_user_patterns


class ForgetThreadForm(forms.Form):
    user = forms.CharField(max_length=200, widget=UserPicker)
    agent = forms.CharField(max_length=64, widget=AgentPicker)
    thread = forms.CharField(max_length=200)
    confirm = forms.CharField(required=False, max_length=200, label="Type the thread id to confirm")

    def clean_user(self) -> str:
        return clean_person(self.cleaned_data["user"])

    def clean_agent(self) -> str:
        return clean_agent(self.cleaned_data.get("agent", ""))


class EraseForm(forms.Form):
    """Erase a person: the admin types the user id again (no free-text reason: an
    erasure's audit entry must hold no content)."""

    user = forms.CharField(max_length=200)
    confirm = forms.CharField(max_length=200, label="Type the user id to confirm")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "user" in data and (data.get("confirm") or "").strip() != data["user"]:
            self.add_error("confirm", "Type the user id exactly to confirm.")
        return data


class RetryForm(forms.Form):
    """Retry a failed or stuck turn (or all of them): an optional note for the audit."""

    note = forms.CharField(required=False, max_length=2000)


# --- agents and API keys ----------------------------------------------------------------


class ApiKeyForm(forms.Form):
    name = forms.CharField(max_length=100)
    allowed_agents = forms.CharField(required=False, max_length=1000, help_text="comma-separated; empty: every agent")

    allowed_users = forms.CharField(
        required=False,
        max_length=2000,
        help_text="comma-separated user ids, * matches any run of characters (acme:*); empty: every user",
    )

    def clean_allowed_agents(self) -> list[str]:
        raw = self.cleaned_data.get("allowed_agents", "")
        return sorted({clean_agent(item) for item in raw.split(",") if item.strip()})

    def clean_allowed_users(self) -> list[str]:
        try:
            return parse_user_patterns(self.cleaned_data.get("allowed_users", ""))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


class ReasonOnly(forms.Form):
    reason = forms.CharField(required=False, max_length=2000)


# --- people and the team -----------------------------------------------------------------

ROLE_CHOICES = [("viewer", "viewer (reads)"), ("reviewer", "reviewer (curates)"), ("admin", "admin (everything)")]


class UsersFilter(forms.Form):
    q = forms.CharField(required=False, max_length=200, label="User id contains", widget=UserPicker)
    page = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)


class PickForm(forms.Form):
    """What a picker was typed so far. htmx sends the field under its own name: `user`,
    `agent`, `q` (the users page's search box), or a prefixed one (`new-agent`)."""

    typed = forms.CharField(required=False, max_length=200)

    @classmethod
    def of(cls, query: Any, name: str) -> str:
        value = query.get(name) or query.get("q") or ""
        if not value:
            value = next((v for k, v in query.items() if k.endswith("-" + name) and v), "")
        form = cls({"typed": value})
        return form.cleaned_data["typed"].strip() if form.is_valid() else ""


class AccountForm(forms.Form):
    username = forms.CharField(max_length=150)
    email = forms.EmailField(required=False)
    role = forms.ChoiceField(choices=ROLE_CHOICES, initial="viewer")

    def clean_username(self) -> str:
        value = self.cleaned_data["username"].strip()
        UnicodeUsernameValidator()(value)
        if User.objects.filter(username__iexact=value).exists():
            raise forms.ValidationError("An account with this username already exists.")
        return value


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=ROLE_CHOICES)


class AccountStateForm(forms.Form):
    active = forms.TypedChoiceField(choices=[("1", "active"), ("0", "deactivated")], coerce=lambda v: v == "1")


# --- projects and their tenants (dashboard/views/projects.py) ---------------------------


class ProjectsFilter(forms.Form):
    q = forms.CharField(required=False, max_length=200, label="Project")
    page = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)


class ProjectTenancyForm(forms.Form):
    """A project's owner: a tenant name ("" for the users without a tenant prefix), or shared."""

    project = forms.CharField(max_length=200)
    tenant = forms.CharField(required=False, max_length=200, strip=False)
    shared = forms.BooleanField(required=False, label="Shared with every tenant")
    reason = forms.CharField(required=False, max_length=2000)

    def clean_project(self) -> str:
        from facts.intake.turns import TurnRejected, clean_id

        try:
            return str(clean_id("project", self.cleaned_data["project"], required=True, allow_paths=False))
        except TurnRejected as exc:
            raise forms.ValidationError(exc.message) from None

    def clean_tenant(self) -> str:
        from facts.tenancy import check_tenant

        try:
            return check_tenant(self.cleaned_data.get("tenant") or "")
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
