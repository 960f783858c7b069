"""Every form of the dashboard: each input a page takes, GET filters and the search box
included, goes through one of these (facts and review, profiles and people, the audit
log, agents' budgets and API keys, the context preview and the search playground)."""

from __future__ import annotations

from datetime import UTC, datetime, time
from typing import Any

from django import forms
from django.contrib.auth.models import User
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.urls import reverse_lazy

from facts import manual, tenancy
from facts.enums import PROFILE_SECTIONS, CardStatus, Category, choices
from facts.errors import InvalidId
from facts.gate import REASON_CODES
from facts.ids import check_fact_id, normalize_agent
from facts.models import AuditEvent, Candidate, ExtractionRun
from facts.people import NoSuchPerson, PersonError, person_id
from memoryadmin.models import parse_user_patterns
from retrieval.limits import SEARCH_LIMIT_DEFAULT, SEARCH_LIMIT_MAX, SEARCH_LIMIT_MIN

ANY = [("", "any")]


class Picker(forms.TextInput):
    """A text input that suggests ids as one types: htmx asks the picker endpoint for
    `<option>`s of a `<datalist>` rendered beside the input (no script of our own, so the
    strict CSP holds). Without JS it is a plain text box. It sets its own target, swap,
    select and push-url: a filter form's hx-* attributes are inherited otherwise."""

    template_name = "dashboard/widgets/picker.html"
    endpoint = ""

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        widget_attrs = context["widget"]["attrs"]
        list_id = f"{widget_attrs.get('id') or 'id_' + name}-options"
        widget_attrs.update(
            {
                "list": list_id,
                "autocomplete": "off",
                "hx-get": str(self.endpoint),
                "hx-trigger": "input changed delay:250ms, focus once",
                "hx-target": f"#{list_id}",
                "hx-swap": "innerHTML",
                "hx-select": "unset",
                "hx-push-url": "false",
            }
        )
        context["widget"]["list_id"] = list_id
        return context


class UserPicker(Picker):
    endpoint = reverse_lazy("pick_users")


class AgentPicker(Picker):
    endpoint = reverse_lazy("pick_agents")


def clean_agent(value: str) -> str:
    value = (value or "").strip()
    if not value:
        return ""
    try:
        return normalize_agent(value)
    except InvalidId as exc:
        raise forms.ValidationError(str(exc)) from None


def day_start(value: Any) -> datetime | None:
    return None if value is None else datetime.combine(value, time.min, tzinfo=UTC)


def day_end(value: Any) -> datetime | None:
    return None if value is None else datetime.combine(value, time.max, tzinfo=UTC)


class ScopeFilters(forms.Form):
    user = forms.CharField(required=False, max_length=200, widget=UserPicker)
    agent = forms.CharField(required=False, max_length=64, widget=AgentPicker)

    def clean_agent(self) -> str:
        return clean_agent(self.cleaned_data.get("agent", ""))

    def clean_user(self) -> str:
        return self.cleaned_data.get("user", "").strip()


class FactFilters(ScopeFilters):
    project = forms.CharField(required=False, max_length=200)
    category = forms.ChoiceField(required=False, choices=ANY + choices(Category))
    status = forms.ChoiceField(required=False, choices=ANY + choices(CardStatus))
    key = forms.CharField(required=False, max_length=120)
    thread = forms.CharField(required=False, max_length=200)
    q = forms.CharField(required=False, max_length=300, label="Text search")
    page = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("q") and not (data.get("user") and data.get("agent")):
            self.add_error("q", "Text search runs in one scope, as an agent's search does: give a user and an agent.")
        return data


class ReasonForm(forms.Form):
    reason = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))


class OptionalReasonForm(forms.Form):
    reason = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))


class CorrectForm(forms.Form):
    content = forms.CharField(max_length=5000, widget=forms.Textarea(attrs={"rows": 4}))
    key = forms.CharField(max_length=120)
    category = forms.ChoiceField(choices=choices(Category))
    confidence = forms.FloatField(min_value=0, max_value=1)
    reason = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))
    # The card's revision the form was shown for: a correction of an older revision is
    # refused (someone else's change in between would be silently overwritten).
    revision = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def clean_content(self) -> str:
        value = self.cleaned_data["content"].strip()
        if not value:
            raise forms.ValidationError("The content cannot be empty.")
        return value

    def clean_key(self) -> str:
        return self.cleaned_data["key"].strip()


class AddFactForm(forms.Form):
    """A fact written by hand: whose (a user × agent, or a project), its key, category
    and content, checked by `facts.manual.check` (the agents' doors' rules)."""

    scope = forms.ChoiceField(
        choices=[("user", "A user (with one agent)"), ("project", "A project (every member's agents)")],
        initial="user",
        widget=forms.RadioSelect,
    )
    user = forms.CharField(required=False, max_length=400, strip=False, widget=UserPicker, label="User id")
    agent = forms.CharField(
        required=False, max_length=200, widget=AgentPicker, label="Agent", help_text="empty: the default agent"
    )
    project = forms.CharField(required=False, max_length=400, strip=False, label="Project id")
    key = forms.CharField(max_length=400, label="Key", help_text="e.g. response_language")
    category = forms.ChoiceField(choices=choices(Category), initial=Category.PREFERENCE)
    content = forms.CharField(max_length=4000, strip=False, widget=forms.Textarea(attrs={"rows": 3}))
    reason = forms.CharField(required=False, max_length=2000, label="Why (kept in the audit log)")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:
            return data
        try:
            data["fact"] = manual.check(
                scope=data["scope"],
                user_id=data.get("user", ""),
                agent_name=data.get("agent", ""),
                project_id=data.get("project", ""),
                key=data["key"],
                category=data["category"],
                content=data["content"],
            )
        except manual.ManualFactError as exc:
            self.add_error(exc.field if exc.field in self.fields else None, exc.message)
        return data


class ExpireForm(OptionalReasonForm):
    at = forms.DateTimeField(
        required=False,
        label="Expire at (empty: now)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )


class ReviewByForm(OptionalReasonForm):
    review_by = forms.DateField(
        required=False, label="Review by (empty: clear)", widget=forms.DateInput(attrs={"type": "date"})
    )


class ForgetThreadForm(forms.Form):
    user = forms.CharField(max_length=200, widget=UserPicker)
    agent = forms.CharField(max_length=64, widget=AgentPicker)
    thread = forms.CharField(max_length=200)
    confirm = forms.CharField(required=False, max_length=200, label="Type the thread id to confirm")

    def clean_user(self) -> str:
        return clean_person(self.cleaned_data["user"])

    def clean_agent(self) -> str:
        return clean_agent(self.cleaned_data.get("agent", ""))


class CandidateFilters(ScopeFilters):
    verdict = forms.ChoiceField(required=False, choices=ANY + list(Candidate.Verdict.choices))
    reason = forms.ChoiceField(required=False, choices=ANY + [(c, c) for c in REASON_CODES])
    state = forms.ChoiceField(
        required=False,
        choices=[
            ("open", "open (to review)"),
            *Candidate.ReviewState.choices,
            ("reviewed", "reviewed (approved or dismissed)"),
            ("all", "all"),
        ],
    )
    kind = forms.ChoiceField(required=False, choices=ANY + list(Candidate.Kind.choices))
    category = forms.ChoiceField(required=False, choices=ANY + choices(Category))
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    page = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)


class ApproveForm(forms.Form):
    note = forms.CharField(
        label="Why (kept with the review)", max_length=2000, widget=forms.Textarea(attrs={"rows": 2})
    )
    content = forms.CharField(required=False, max_length=5000, widget=forms.Textarea(attrs={"rows": 3}))
    key = forms.CharField(required=False, max_length=120)
    category = forms.ChoiceField(required=False, choices=ANY + choices(Category))
    confidence = forms.FloatField(required=False, min_value=0, max_value=1)

    def overrides(self, candidate: Candidate) -> dict[str, Any]:
        """Only the fields the reviewer actually changed."""
        out: dict[str, Any] = {}
        data = self.cleaned_data
        for name in ("content", "key", "category"):
            value = (data.get(name) or "").strip()
            if value and value != (getattr(candidate, name) or ""):
                out[name] = value
        if data.get("confidence") is not None and data["confidence"] != candidate.confidence:
            out["confidence"] = data["confidence"]
        return out


class DismissForm(forms.Form):
    note = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))


class BulkForm(CandidateFilters):
    action = forms.ChoiceField(choices=[("approve", "approve"), ("dismiss", "dismiss")])
    note = forms.CharField(required=False, max_length=2000)
    confirm = forms.BooleanField(required=False)
    expected = forms.IntegerField(required=False, min_value=0, widget=forms.HiddenInput)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("confirm") and data.get("action") == "approve" and not (data.get("note") or "").strip():
            self.add_error("note", "Approving overrides the gate: write why.")
        return data


class ProfileForm(forms.Form):
    """Every section of one profile in one form: Save writes each section whose text
    differs from the profile it was shown, as one new version, so text typed in one
    section is never dropped by saving another (issue 37)."""

    user = forms.CharField(max_length=200, widget=forms.HiddenInput)
    revision = forms.IntegerField(min_value=0, widget=forms.HiddenInput)
    reason = forms.CharField(required=False, max_length=2000, label="Why")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in PROFILE_SECTIONS:
            self.fields[name] = forms.CharField(
                required=False, max_length=10000, widget=forms.Textarea(attrs={"rows": 3})
            )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        for name in PROFILE_SECTIONS:
            if name in data:
                # A browser sends a textarea's line breaks as CRLF; the file keeps "\n".
                data[name] = data[name].replace("\r\n", "\n").replace("\r", "\n")
        return data


def clean_person(value: str) -> str:
    """A person's id as typed: someone memory holds something about (`facts.people`);
    the error's code says which answer a page gives (``no_such_person``: 404)."""
    try:
        return person_id(value)
    except NoSuchPerson as exc:
        raise forms.ValidationError(str(exc), code="no_such_person") from None
    except PersonError as exc:
        raise forms.ValidationError(str(exc), code="invalid_person") from None


class UserIdForm(forms.Form):
    """One person's id (`clean_person`): export, erase, the Profiles page."""

    user = forms.CharField(max_length=200, strip=False, widget=UserPicker)

    def clean_user(self) -> str:
        return clean_person(self.cleaned_data["user"])

    @property
    def status(self) -> int:
        """The page's answer to an invalid form: 404 for "no such person", else 400."""
        return 404 if self.has_error("user", "no_such_person") else 400


class PageForm(forms.Form):
    page = forms.IntegerField(required=False, min_value=1)


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


class DeleteForm(OptionalReasonForm):
    confirm = forms.CharField(max_length=17, label="Type the fact id to confirm")


class AuditFilters(forms.Form):
    action = forms.ChoiceField(required=False, choices=ANY + list(AuditEvent.Action.choices))
    actor = forms.CharField(required=False, max_length=150)
    user = forms.CharField(required=False, max_length=200, widget=UserPicker)
    agent = forms.CharField(required=False, max_length=64, widget=AgentPicker)
    target = forms.CharField(required=False, max_length=200)
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    page = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)


class ResolveForm(forms.Form):
    keep = forms.CharField(max_length=17)
    others = forms.CharField(max_length=2000, help_text="comma-separated fact ids")
    reason = forms.CharField(required=False, max_length=2000)


class RetryForm(forms.Form):
    """Retry a failed or stuck turn (or all of them): an optional note for the audit."""

    note = forms.CharField(required=False, max_length=2000)


class RunFilters(ScopeFilters):
    """The runs page's filters; the status choices are the run's own."""

    status = forms.ChoiceField(required=False, choices=ANY + [(s.value, s.value) for s in ExtractionRun.Status])
    page = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)


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


# --- context preview and search playground ------------------------------------------------


class ScopeForm(forms.Form):
    user = forms.CharField(max_length=200, widget=UserPicker)
    agent = forms.CharField(max_length=64, widget=AgentPicker)
    project = forms.CharField(required=False, max_length=200)

    def clean_agent(self) -> str:
        return clean_agent(self.cleaned_data.get("agent", ""))

    def clean_user(self) -> str:
        return self.cleaned_data["user"].strip()

    def clean_project(self) -> str:
        return self.cleaned_data.get("project", "").strip()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        user, project = data.get("user"), data.get("project")
        if user and project and not tenancy.may_use(user, project):
            # What the agents' doors refuse is not previewed as if it were served.
            self.add_error(
                "project",
                f"{project!r} belongs to another tenant than {user!r}: agents get 403 project_not_allowed",
            )
        return data


class PreviewForm(ScopeForm):
    mode = forms.ChoiceField(
        required=False, choices=[("auto", "auto (profile + facts)"), ("tool", "tool (profile only)")], initial="auto"
    )
    budget = forms.IntegerField(required=False, min_value=0, max_value=100_000)
    correction_budget = forms.IntegerField(required=False, min_value=0, max_value=100_000)
    top_n = forms.IntegerField(required=False, min_value=0, max_value=10_000)
    all_excluded = forms.BooleanField(required=False, widget=forms.HiddenInput)


class AgentSettingsForm(forms.Form):
    agent = forms.CharField(max_length=64, widget=AgentPicker)
    budget = forms.IntegerField(min_value=1, max_value=100_000)
    correction_budget = forms.IntegerField(min_value=0, max_value=100_000)
    top_n = forms.IntegerField(min_value=0, max_value=10_000)
    reason = forms.CharField(required=False, max_length=2000)

    def clean_agent(self) -> str:
        value = clean_agent(self.cleaned_data.get("agent", ""))
        if not value:
            raise forms.ValidationError("an agent name is required")
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if (
            data.get("correction_budget") is not None
            and data.get("budget") is not None
            and data["correction_budget"] > data["budget"]
        ):
            self.add_error("correction_budget", "The correction budget is part of the budget: it cannot be larger.")
        return data


class SearchForm(ScopeForm):
    q = forms.CharField(label="Query", max_length=500)
    limit = forms.IntegerField(
        required=False, min_value=SEARCH_LIMIT_MIN, max_value=SEARCH_LIMIT_MAX, initial=SEARCH_LIMIT_DEFAULT
    )


class GoldenForm(ScopeForm):
    q = forms.CharField(max_length=500)
    expected = forms.CharField(max_length=2000, help_text="comma-separated fact ids, best first")

    def clean_expected(self) -> list[str]:
        ids = [i.strip() for i in self.cleaned_data["expected"].split(",") if i.strip()]
        try:
            return [check_fact_id(i) for i in ids][:10]
        except InvalidId as exc:
            raise forms.ValidationError(str(exc)) from None


class GoldenCheckForm(forms.Form):
    """Which golden queries to re-check: one (`pk`), an agent's, or (neither) all."""

    pk = forms.IntegerField(required=False, min_value=1)
    agent = forms.CharField(required=False, max_length=64)

    def clean_agent(self) -> str:
        return clean_agent(self.cleaned_data.get("agent", ""))


# --- people and the team -----------------------------------------------------------------


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


ROLE_CHOICES = [("viewer", "viewer (reads)"), ("reviewer", "reviewer (curates)"), ("admin", "admin (everything)")]


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


# --- review queue: selected rows, undo; profile revert; confirmations -----------------------

SELECTED_LIMIT = 500


class IdsField(forms.Field):
    """Several integer ids under one name (the queue's row checkboxes)."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: Any) -> list[int]:
        values = value if isinstance(value, list | tuple) else ([value] if value else [])
        if len(values) > SELECTED_LIMIT:
            raise forms.ValidationError(f"At most {SELECTED_LIMIT} rows at once.")
        try:
            return sorted({int(v) for v in values})
        except (TypeError, ValueError):
            raise forms.ValidationError("Not a list of row ids.") from None


class SelectedForm(forms.Form):
    ids = IdsField(error_messages={"required": "Select at least one row."})
    action = forms.ChoiceField(choices=[("approve", "approve"), ("dismiss", "dismiss")])
    note = forms.CharField(required=False, max_length=2000)
    next = forms.CharField(required=False, max_length=2000)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("action") == "approve" and not (data.get("note") or "").strip():
            self.add_error("note", "Approving overrides the gate: write why.")
        return data


class RestoreForm(forms.Form):
    ids = IdsField()
    next = forms.CharField(required=False, max_length=2000)


class ProfileRevertForm(forms.Form):
    user = forms.CharField(max_length=200)
    revision = forms.IntegerField(min_value=1, help_text="the version to go back to")
    current = forms.IntegerField(min_value=0, help_text="the revision the curator was looking at")
    reason = forms.CharField(required=False, max_length=2000)

    def clean_user(self) -> str:
        return self.cleaned_data["user"].strip()


# --- gate analytics (dashboard/views/gate.py) ------------------------------------


class AgreementFilters(ScopeFilters):
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))


class BacktestForm(AgreementFilters):
    threshold = forms.FloatField(
        required=False, min_value=0, max_value=1, widget=forms.NumberInput(attrs={"step": "0.05"})
    )
    review_mode = forms.ChoiceField(
        required=False, choices=[("", "as recorded"), ("auto", "auto"), ("manual", "manual")], label="Review mode"
    )

    @property
    def changes_something(self) -> bool:
        data = self.cleaned_data
        return data.get("threshold") is not None or bool(data.get("review_mode"))


class ThresholdForm(forms.Form):
    threshold = forms.FloatField(min_value=0, max_value=1)
    reason = forms.CharField(
        max_length=2000, widget=forms.Textarea(attrs={"rows": 2}), label="Why (kept in the audit log)"
    )


class InjectionsForm(ScopeFilters):
    at = forms.DateTimeField(
        required=False,
        label="At (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M:%S"),
        input_formats=["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"],
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not data.get("user"):
            self.add_error("user", "Give the user whose agent you want to look at.")
        return data


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
        from facts.turns import TurnRejected, clean_id

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
