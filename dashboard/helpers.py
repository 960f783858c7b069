"""Page helpers every dashboard view shares: who is acting, the audit entry of a
settings change, the flash line of a form that did not validate, paging with the
filters kept, the "changed" event htmx regions refresh on, line diffs of two texts, the
fact named in a URL checked against its scope, and when a recorded message was said."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.core.paginator import Page, Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django_htmx.http import trigger_client_event
from django_htmx.middleware import HtmxDetails

from facts.audit import record
from facts.models import AuditEvent, FactCard
from facts.storage.errors import InvalidId
from facts.storage.ids import check_fact_id

PAGE_SIZE = 50


class HtmxHttpRequest(HttpRequest):
    """The request a view that answers htmx receives: django-htmx's middleware sets
    `request.htmx` (truthy when htmx sent the request), as django-htmx documents for
    type checking."""

    htmx: HtmxDetails


def actor_of(request: HttpRequest) -> str:
    return request.user.get_username()


def audit(request: HttpRequest, action: str, **fields: Any) -> AuditEvent:
    """The audit entry of a settings change made on a page (budgets, keys, accounts,
    rebuilds): `facts.audit.record` with the signed-in curator as the actor. Changes to
    memory are audited by their verb in `facts.curation`, not here."""
    return record(actor_of(request), action, **fields)


def flash_errors(
    request: HttpRequest, prefix: str, form: forms.BaseForm, *, label: Callable[[str], str] | None = str
) -> None:
    """The one flash line of a form that did not validate: `prefix` then each field's
    errors ("Not saved: key: too long; category: …"); `label` names a field for people,
    None leaves the names out."""
    if label is None:
        text = " ".join(str(e) for errors in form.errors.values() for e in errors)
    else:
        text = "; ".join(f"{label(k)}: {' '.join(str(e) for e in v)}" for k, v in form.errors.items())
    messages.error(request, f"{prefix} {text}")


def page_of(request: HttpRequest, items: Any, number: int | None, per_page: int = PAGE_SIZE) -> Page:
    return Paginator(items, per_page).get_page(number or 1)


def query_without_page(data: dict[str, Any]) -> str:
    """The current filters as a query string (for pagination links that keep them)."""
    return urlencode({k: v for k, v in data.items() if k != "page" and v not in (None, "")})


def changed(response: HttpResponse, event: str = "factsChanged") -> HttpResponse:
    return trigger_client_event(response, event)


def diff_lines(before: str, after: str, skip: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(css class, line) pairs of a unified diff; the template escapes the lines."""
    out: list[tuple[str, str]] = []
    before_lines = [line for line in before.splitlines() if not (skip and line.startswith(skip))]
    after_lines = [line for line in after.splitlines() if not (skip and line.startswith(skip))]
    for line in difflib.unified_diff(before_lines, after_lines, lineterm="", n=1):
        if line.startswith(("---", "+++")):
            continue
        kind = {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "ctx")
        out.append((kind, line))
    return out


def scope_label(row: FactCard) -> str:
    if row.user_id:
        return f"{row.user_id} × {row.agent_name}"
    return f"project {row.project_id}"


def fact_or_404(fact_id: str) -> FactCard:
    try:
        check_fact_id(fact_id)
    except InvalidId:
        raise Http404("no such fact") from None
    row = FactCard.objects.filter(id=fact_id).first()
    if row is None:
        raise Http404("no such fact")
    return row


def fact_in_scope(request: HttpRequest, fact_id: str) -> FactCard:
    """The fact named in the URL, checked against the scope the form was shown for.

    Action forms carry the user × agent (or project) they were rendered for; a fact id
    from another scope is answered as not found, so a tampered URL cannot act elsewhere.
    """
    row = fact_or_404(fact_id)
    if request.POST.get("scope", "") != scope_label(row):
        raise Http404("no such fact in this scope")
    return row


def said_at_of(row: Any) -> datetime | None:
    """When a run's recorded message (`ExtractionRun.filtered_rows`) was said, if its
    turn said so; None for rows recorded without it."""
    value = row.get("said_at") if isinstance(row, dict) else None
    if not isinstance(value, str):
        return None
    try:
        said = datetime.fromisoformat(value)
    except ValueError:
        return None
    return said if said.tzinfo is not None else None
