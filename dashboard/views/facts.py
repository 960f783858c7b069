"""Facts pages: the list with its filters and text search, a fact's detail (versions,
superseded chain, evidence in its conversation) and the curator's actions on one card
(correct, expire, restore, review-by, revert, delete).

Every change is a verb of `facts.curation` (the write through `facts.storage.writer` and its
`AuditEvent`); these views only check forms and say how it went.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.db import connection
from django.db.models import Q, QuerySet
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard.confirm import confirm_first
from dashboard.forms.common import OptionalReasonForm
from dashboard.forms.memory import AddFactForm, CorrectForm, DeleteForm, ExpireForm, FactFilters, ReviewByForm
from dashboard.helpers import (
    HtmxHttpRequest,
    actor_of,
    changed,
    diff_lines,
    fact_in_scope,
    fact_or_404,
    flash_errors,
    page_of,
    query_without_page,
    said_at_of,
    scope_label,
)
from facts.access import ADMINISTER, CURATE
from facts.curation import cards, manual
from facts.injections import last_injected
from facts.models import ExtractionRun, FactCard, FactRevision, FactUsage
from facts.storage.cardfile import Card, parse_card
from facts.storage.errors import CardParseError, InvalidId, LockTimeout, RevisionConflict
from facts.storage.store import get_store
from retrieval.search import search

# --- facts list -------------------------------------------------------------------------


def search_ids(query: str, *, user_id: str, agent_name: str, project_id: str) -> list[str]:
    """Fact ids matching `query` through the FTS index, best first."""
    hits = search(query, user_id=user_id, agent_name=agent_name, project_id=project_id or None, limit=10)
    return [hit.id for hit in hits]


def filtered_facts(data: dict[str, Any]) -> tuple[QuerySet[FactCard], str]:
    """The facts matching the filters, and a note on how text search was done."""
    scope = Q()
    if data.get("user"):
        scope &= Q(user_id=data["user"])
    if data.get("agent"):
        scope &= Q(agent_name=data["agent"])
    if data.get("project"):
        project = Q(project_id=data["project"], user_id="")
        # A user's own cards and the project's cards: what an agent run in the project sees.
        scope = (scope | project) if data.get("user") else project
    rows = FactCard.objects.filter(scope)
    broad = not any(data.get(name) for name in ("user", "agent", "project", "key", "thread", "q"))
    for name in ("category", "status", "key"):
        if not data.get(name):
            continue
        if name == "status" and broad and connection.vendor == "sqlite":
            # With only a status filter SQLite picks the status index and then sorts ~100k
            # rows for every page; the unary + keeps it walking the recency index instead.
            table = FactCard._meta.db_table
            rows = rows.extra(where=[f"+{table}.status = %s"], params=[data[name]])
        else:
            rows = rows.filter(**{name: data[name]})
    if data.get("thread"):
        rows = rows.filter(source_thread_id=data["thread"])
    note = ""
    if data.get("q"):
        ids = search_ids(
            data["q"],
            user_id=data.get("user", ""),
            agent_name=data.get("agent", ""),
            project_id=data.get("project", ""),
        )
        order = {fact_id: n for n, fact_id in enumerate(ids)}
        found = {row.id: row for row in rows.filter(id__in=ids)}
        ranked = [found[i] for i in sorted(found, key=order.__getitem__)]
        return ranked, "Ranked by the search index (live cards only)."  # type: ignore[return-value]
    return rows.order_by("-updated_at", "id"), note


@require_GET
@login_required
def fact_list(request: HtmxHttpRequest) -> HttpResponse:
    form = FactFilters(request.GET)
    note = ""
    if form.is_valid():
        rows, note = filtered_facts(form.cleaned_data)
        page = page_of(request, rows, form.cleaned_data.get("page"))
        query = query_without_page(form.cleaned_data)
    else:
        page = page_of(request, FactCard.objects.none(), 1)
        query = ""
    ctx = {"form": form, "page": page, "query": query, "note": note, "now": timezone.now()}
    template = (
        "dashboard/fact_list.html#rows"
        if request.htmx and request.htmx.target == "fact-rows"
        else "dashboard/fact_list.html"
    )
    return render(request, template, ctx)


# --- add a fact by hand ------------------------------------------------------------------


@login_required
@permission_required(CURATE, raise_exception=True)
@require_http_methods(["GET", "POST"])
def fact_add(request: HtmxHttpRequest) -> HttpResponse:
    """A curator writes a fact directly (reviewers and admins, not viewers): checked like
    the agents' input, written through the one write function, audited as add_fact."""
    if request.method == "POST":
        form = AddFactForm(request.POST)
        if form.is_valid():
            fact: manual.ManualFact = form.cleaned_data["fact"]
            try:
                added = manual.add_fact(fact, actor=actor_of(request), reason=form.cleaned_data.get("reason", ""))
            except (RevisionConflict, LockTimeout, InvalidId) as exc:
                messages.error(request, f"Not added: {exc}")
                return render(request, "dashboard/fact_add.html", {"form": form}, status=409)
            if not added.written:
                messages.info(request, f"Nothing added: the active card {added.fact_id} already says exactly this.")
            elif added.replaced:
                messages.success(
                    request, f"Added {added.fact_id}; it replaces {added.replaced}, the card with the same key."
                )
            else:
                messages.success(request, f"Added {added.fact_id}: live now, in the context preview and search.")
            return redirect("fact_detail", fact_id=added.fact_id)
        return render(request, "dashboard/fact_add.html", {"form": form}, status=400)
    initial = {name: request.GET[name] for name in ("user", "agent", "project") if request.GET.get(name)}
    if initial.get("project") and not initial.get("user"):
        initial["scope"] = "project"
    return render(request, "dashboard/fact_add.html", {"form": AddFactForm(initial=initial)})


# --- fact detail ------------------------------------------------------------------------


@dataclass
class FieldChange:
    name: str
    before: str
    after: str


@dataclass
class Version:
    revision: int
    actor: str
    reason: str
    created_at: datetime
    text: str
    fields: list[FieldChange]  # front-matter fields this revision changed (set, for the first)
    content: list[tuple[str, str]]  # the content's diff (the whole content, for the first)
    diff: list[tuple[str, str]]  # the file's diff, only when a revision cannot be read as a card
    first: bool = False


# Every card revision bumps these; the version's heading shows them, never its changes.
CARD_NOISE = ("updated_at:", "revision:")
NOISE_FIELDS = frozenset({"updated_at", "revision"})
# What a new card's first revision lists besides its content (the rest is the scope,
# ids and time stamps, shown at the top of the page).
FIRST_FIELDS = ("key", "category", "status", "confidence", "source.kind")


def card_fields(text: str) -> tuple[dict[str, str], str] | None:
    """A revision's front matter as flat strings ("source.kind": "manual") and its content,
    or None when the text does not read as a card."""
    try:
        card = parse_card(text, Path("revision.md"))
    except CardParseError:
        return None
    flat: dict[str, str] = {}
    for name, value in card.model_dump(mode="json", exclude={"content"}).items():
        items = value.items() if isinstance(value, dict) else [("", value)]
        for sub, item in items:
            flat[f"{name}.{sub}" if sub else name] = "" if item is None else str(item)
    return flat, card.content


def version_changes(previous: str, text: str) -> tuple[list[FieldChange], list[tuple[str, str]], list[tuple[str, str]]]:
    """What one revision changed: the fields whose value differs and the content's diff
    (not the whole front matter, which every revision rewrites)."""
    now = card_fields(text)
    before = card_fields(previous) if previous else ({}, "")
    if now is None or before is None:
        return [], [], diff_lines(previous, text, CARD_NOISE)
    (fields, content), (old_fields, old_content) = now, before
    if not previous:
        changes = [FieldChange(name, "", fields[name]) for name in FIRST_FIELDS if fields.get(name)]
        return changes, [("add", line) for line in content.splitlines()], []
    changes = [
        FieldChange(name, old_fields.get(name, ""), value)
        for name, value in fields.items()
        if name not in NOISE_FIELDS and old_fields.get(name, "") != value
    ]
    return changes, diff_lines(old_content, content), []


def versions_of(fact_id: str) -> list[Version]:
    revisions = list(FactRevision.objects.filter(fact_id=fact_id).order_by("revision"))
    out: list[Version] = []
    previous = ""
    for rev in revisions:
        fields, content, diff = version_changes(previous, rev.text)
        out.append(
            Version(rev.revision, rev.actor, rev.reason, rev.created_at, rev.text, fields, content, diff, not previous)
        )
        previous = rev.text
    out.reverse()
    return out


def chain_of(row: FactCard) -> list[FactCard]:
    """Every card of the same key in the same bucket: the superseded chain."""
    if not row.key:
        return [row]
    same = FactCard.objects.filter(user_id=row.user_id, agent_name=row.agent_name, key=row.key)
    if not row.user_id:
        same = same.filter(project_id=row.project_id)
    return list(same.order_by("created_at", "id")[:50])


@require_GET
@login_required
def fact_detail(request: HtmxHttpRequest, fact_id: str) -> HttpResponse:
    row = fact_or_404(fact_id)
    run = None
    if row.source_run_id.isdigit():
        run = ExtractionRun.objects.filter(pk=int(row.source_run_id)).first()
    usage = FactUsage.objects.filter(fact_id=row.id).first()
    versions = versions_of(row.id)
    # A card dated from its conversation (a backfill, issue 35) was written later than
    # it was said: say both. Seconds apart is the same moment.
    recorded = versions[-1].created_at if versions else None
    if recorded is not None and recorded - row.created_at < timedelta(minutes=1):
        recorded = None
    ctx = {
        "fact": row,
        "scope": scope_label(row),
        "versions": versions,
        "recorded_at": recorded,
        "chain": chain_of(row),
        "usage": usage,
        "served": last_injected(row.id),
        "run": run,
        "evidence_row": evidence_row(run, row.source_message_id, row.evidence_text) if run else None,
        "correct_form": correct_form_for(row),
        "expire_form": ExpireForm(),
        "review_form": ReviewByForm(initial={"review_by": row.review_by.date() if row.review_by else None}),
        "reason_form": OptionalReasonForm(),
        "now": timezone.now(),
    }
    return render(request, "dashboard/fact_detail.html", ctx)


def correct_form_for(row: FactCard) -> CorrectForm:
    """The Correct form, filled from the card file (what a correction will be checked
    against: its revision), or from the mirror row when the file cannot be read."""
    try:
        card: Card | FactCard | None = get_store().read_card(row.bucket, row.id)
    except (CardParseError, InvalidId):
        card = None
    source = card or row
    fields = ("content", "key", "category", "confidence", "revision")
    return CorrectForm(initial={name: getattr(source, name) for name in fields})


def evidence_row(run: ExtractionRun, message_id: str, evidence: str) -> dict[str, Any] | None:
    """The message the evidence was quoted from, split around the quote for <mark>."""
    for item in run.filtered_rows or []:
        if isinstance(item, dict) and str(item.get("id")) == message_id:
            content = str(item.get("content", ""))
            before, found, after = content.partition(evidence) if evidence else (content, "", "")
            if not found:
                before, after = content, ""
            return {
                "role": item.get("role", ""),
                "before": before,
                "mark": found,
                "after": after,
                "said_at": said_at_of(item),
            }
    return None


# --- fact actions -------------------------------------------------------------------
# Each action is a verb of `facts.curation.cards` (the write and its audit); the view
# checks the form, names the actor and says how it went.

CHANGE_ERRORS = (RevisionConflict, CardParseError, InvalidId, ValueError)


def done(request: HtmxHttpRequest, row: FactCard, text: str) -> HttpResponse:
    messages.success(request, text)
    return changed(redirect("fact_detail", fact_id=row.id))


def not_changed(request: HtmxHttpRequest, row: FactCard, exc: Exception) -> HttpResponse:
    messages.error(request, f"Nothing was changed: {exc}")
    return redirect("fact_detail", fact_id=row.id)


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def fact_correct(request: HtmxHttpRequest, fact_id: str) -> HttpResponse:
    row = fact_in_scope(request, fact_id)
    form = CorrectForm(request.POST)
    if not form.is_valid():
        flash_errors(request, "Not corrected:", form)
        return redirect("fact_detail", fact_id=row.id)
    data = form.cleaned_data
    try:
        cards.correct(
            row,
            actor=actor_of(request),
            reason=data["reason"],
            content=data["content"],
            key=data["key"],
            category=data["category"],
            confidence=data["confidence"],
            expected_revision=data.get("revision"),
        )
    except CHANGE_ERRORS as exc:
        return not_changed(request, row, exc)
    return done(request, row, "Corrected: a new revision was written.")


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def fact_expire(request: HtmxHttpRequest, fact_id: str) -> HttpResponse:
    row = fact_in_scope(request, fact_id)
    form = ExpireForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not expired: check the date.")
        return redirect("fact_detail", fact_id=row.id)
    try:
        expired = cards.expire(
            row, actor=actor_of(request), reason=form.cleaned_data["reason"], at=form.cleaned_data.get("at")
        )
    except CHANGE_ERRORS as exc:
        return not_changed(request, row, exc)
    return done(request, row, f"Expires {expired.when}.")


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def fact_restore(request: HtmxHttpRequest, fact_id: str) -> HttpResponse:
    row = fact_in_scope(request, fact_id)
    form = OptionalReasonForm(request.POST)
    form.is_valid()
    try:
        cards.restore(row, actor=actor_of(request), reason=form.cleaned_data.get("reason", ""))
    except CHANGE_ERRORS as exc:
        return not_changed(request, row, exc)
    return done(request, row, "Restored: the card is active again.")


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def fact_review_by(request: HtmxHttpRequest, fact_id: str) -> HttpResponse:
    row = fact_in_scope(request, fact_id)
    form = ReviewByForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not saved: check the date.")
        return redirect("fact_detail", fact_id=row.id)
    day = form.cleaned_data.get("review_by")
    try:
        cards.set_review_by(row, actor=actor_of(request), reason=form.cleaned_data.get("reason", ""), day=day)
    except CHANGE_ERRORS as exc:
        return not_changed(request, row, exc)
    return done(request, row, f"Review-by date {'set to ' + day.isoformat() if day else 'cleared'}.")


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def fact_revert(request: HtmxHttpRequest, fact_id: str, revision: int) -> HttpResponse:
    row = fact_in_scope(request, fact_id)
    try:
        target = cards.card_at_revision(row, revision)
    except cards.UnknownRevision:
        raise Http404("no such revision") from None
    except CardParseError as exc:
        messages.error(request, f"Revision {revision} cannot be read: {exc.message}")
        return redirect("fact_detail", fact_id=row.id)
    asked = confirm_first(
        request,
        question=f"Revert “{row.content[:120]}” to revision {revision}?",
        button=f"Revert to revision {revision}",
        cancel=reverse("fact_detail", args=[row.id]),
        extra={"diffs": [("content", diff_lines(row.content, target.content))]},
    )
    if asked:
        return asked
    form = OptionalReasonForm(request.POST)
    form.is_valid()
    reason = form.cleaned_data.get("reason") or f"revert to revision {revision}"
    try:
        cards.revert(row, revision, actor=actor_of(request), reason=reason)
    except (*CHANGE_ERRORS, cards.UnknownRevision) as exc:
        return not_changed(request, row, exc)
    return done(request, row, f"Reverted to revision {revision}.")


@login_required
@permission_required(ADMINISTER, raise_exception=True)
@require_http_methods(["GET", "POST"])
def fact_delete(request: HtmxHttpRequest, fact_id: str) -> HttpResponse:
    if request.method == "GET":
        row = fact_or_404(fact_id)
        return render(
            request, "dashboard/fact_delete.html", {"fact": row, "scope": scope_label(row), "form": DeleteForm()}
        )
    row = fact_in_scope(request, fact_id)
    form = DeleteForm(request.POST)
    if not form.is_valid() or form.cleaned_data["confirm"].strip() != row.id:
        messages.error(request, "Type the fact id to confirm the deletion.")
        return redirect("fact_delete", fact_id=row.id)
    cards.delete_for_good([row], actor=actor_of(request), reason=form.cleaned_data.get("reason", ""))
    messages.success(request, f"{row.id} was deleted permanently.")
    return changed(redirect("fact_list"))
