"""The forms of the pages that change memory: the facts list's filters and a card's
actions (correct, expire, review-by, delete, *Add a fact*), conflicts, the review queue
(filters, approve, dismiss, bulk, selected rows, undo) and profiles (edit, revert)."""

from __future__ import annotations

from typing import Any

from django import forms

from dashboard.forms.common import ANY, AgentPicker, IdsField, OptionalReasonForm, ScopeFilters, UserPicker
from facts.curation import manual
from facts.enums import PROFILE_SECTIONS, CardStatus, Category, choices
from facts.judging.gate import REASON_CODES
from facts.models import Candidate


class FactFilters(ScopeFilters):
    project = forms.CharField(required=False, max_length=200)
    category = forms.ChoiceField(required=False, choices=ANY + choices(Category))
    status = forms.ChoiceField(required=False, choices=ANY + choices(CardStatus))
    key = forms.CharField(required=False, max_length=120)
    thread = forms.CharField(required=False, max_length=200)
    q = forms.CharField(required=False, max_length=300, label="Text search")
    page = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if data.get("q") and not (data.get("user") and data.get("agent")):
            self.add_error("q", "Text search runs in one scope, as an agent's search does: give a user and an agent.")
        return data


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
    and content, checked by `facts.curation.manual.check` (the agents' doors' rules)."""

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
        super().clean()
        data = self.cleaned_data
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
        super().clean()
        data = self.cleaned_data
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
        super().clean()
        data = self.cleaned_data
        for name in PROFILE_SECTIONS:
            if name in data:
                # A browser sends a textarea's line breaks as CRLF; the file keeps "\n".
                data[name] = data[name].replace("\r\n", "\n").replace("\r", "\n")
        return data


class DeleteForm(OptionalReasonForm):
    confirm = forms.CharField(max_length=17, label="Type the fact id to confirm")


class ResolveForm(forms.Form):
    keep = forms.CharField(max_length=17)
    others = forms.CharField(max_length=2000, help_text="comma-separated fact ids")
    reason = forms.CharField(required=False, max_length=2000)


class SelectedForm(forms.Form):
    ids = IdsField(error_messages={"required": "Select at least one row."})
    action = forms.ChoiceField(choices=[("approve", "approve"), ("dismiss", "dismiss")])
    note = forms.CharField(required=False, max_length=2000)
    next = forms.CharField(required=False, max_length=2000)

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
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
