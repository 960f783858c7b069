"""What several forms share: the id pickers (htmx suggestions), an agent's name and a
person's id as the doors check them, day bounds, scope filters, a reason, a page number
and a list of ids."""

from __future__ import annotations

from datetime import UTC, datetime, time
from typing import Any

from django import forms
from django.urls import reverse_lazy
from django.utils.functional import Promise

from facts.intake.people import NoSuchPerson, PersonError, person_id
from facts.storage.errors import InvalidId
from facts.storage.ids import normalize_agent

ANY = [("", "any")]


class Picker(forms.TextInput):
    """A text input that suggests ids as one types: htmx asks the picker endpoint for
    `<option>`s of a `<datalist>` rendered beside the input (no script of our own, so the
    strict CSP holds). Without JS it is a plain text box. It sets its own target, swap,
    select and push-url: a filter form's hx-* attributes are inherited otherwise."""

    template_name = "dashboard/widgets/picker.html"
    endpoint: str | Promise = ""  # a URL, lazily reversed

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


class OptionalReasonForm(forms.Form):
    reason = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))


def clean_person(value: str) -> str:
    """A person's id as typed: someone memory holds something about (`facts.intake.people`);
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


# --- several ids under one name (the queue's ticked rows, an undo) -----------------------

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
