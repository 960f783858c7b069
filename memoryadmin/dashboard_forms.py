"""Forms of the project-level dashboard pages (audit filters live with the facts forms)."""

from __future__ import annotations

from django import forms

from facts.forms import clean_agent

from .models import parse_user_patterns


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
