"""The forms of the pages that read: the context preview and an agent's budgets, the
search playground and golden queries, gate analytics (agreement, backtest, threshold,
the injection log), extraction runs and the audit log."""

from __future__ import annotations

from typing import Any

from django import forms

from dashboard.forms.common import ANY, AgentPicker, ScopeFilters, UserPicker, clean_agent
from facts import tenancy
from facts.models import AuditEvent, ExtractionRun
from facts.storage.errors import InvalidId
from facts.storage.ids import check_fact_id
from retrieval.limits import SEARCH_LIMIT_DEFAULT, SEARCH_LIMIT_MAX, SEARCH_LIMIT_MIN


class AuditFilters(forms.Form):
    action = forms.ChoiceField(required=False, choices=ANY + list(AuditEvent.Action.choices))
    actor = forms.CharField(required=False, max_length=150)
    user = forms.CharField(required=False, max_length=200, widget=UserPicker)
    agent = forms.CharField(required=False, max_length=64, widget=AgentPicker)
    target = forms.CharField(required=False, max_length=200)
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    page = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)


class RunFilters(ScopeFilters):
    """The runs page's filters; the status choices are the run's own."""

    status = forms.ChoiceField(required=False, choices=ANY + [(s.value, s.value) for s in ExtractionRun.Status])
    page = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)


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
        super().clean()
        data = self.cleaned_data
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
        super().clean()
        data = self.cleaned_data
        if not data.get("user"):
            self.add_error("user", "Give the user whose agent you want to look at.")
        return data
