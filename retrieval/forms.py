"""Forms of the read-side dashboard pages (context preview, search playground)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings

from facts.forms import clean_agent

from .models import AgentSettings


class ScopeForm(forms.Form):
    user = forms.CharField(max_length=200)
    agent = forms.CharField(max_length=64)
    project = forms.CharField(required=False, max_length=200)

    def clean_agent(self) -> str:
        return clean_agent(self.cleaned_data.get("agent", ""))

    def clean_user(self) -> str:
        return self.cleaned_data["user"].strip()

    def clean_project(self) -> str:
        return self.cleaned_data.get("project", "").strip()


class PreviewForm(ScopeForm):
    mode = forms.ChoiceField(
        required=False, choices=[("auto", "auto (profile + facts)"), ("tool", "tool (profile only)")], initial="auto"
    )
    budget = forms.IntegerField(required=False, min_value=0, max_value=100_000)
    correction_budget = forms.IntegerField(required=False, min_value=0, max_value=100_000)
    top_n = forms.IntegerField(required=False, min_value=0, max_value=10_000)
    all_excluded = forms.BooleanField(required=False, widget=forms.HiddenInput)


class AgentSettingsForm(forms.Form):
    agent = forms.CharField(max_length=64)
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


def settings_of(agent: str) -> dict[str, int]:
    row = AgentSettings.objects.filter(agent_name=agent).first()
    if row is None:
        return {
            "budget": settings.MEMORY_CONTEXT_BUDGET,
            "correction_budget": settings.MEMORY_CORRECTION_BUDGET,
            "top_n": settings.MEMORY_CONTEXT_TOP_N,
        }
    return {"budget": row.budget, "correction_budget": row.correction_budget, "top_n": row.top_n}


class SearchForm(ScopeForm):
    q = forms.CharField(label="Query", max_length=500)
    limit = forms.IntegerField(required=False, min_value=1, max_value=10, initial=5)


class GoldenForm(ScopeForm):
    q = forms.CharField(max_length=500)
    expected = forms.CharField(max_length=2000, help_text="comma-separated fact ids, best first")

    def clean_expected(self) -> list[str]:
        from facts.errors import InvalidId
        from facts.ids import check_fact_id

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
