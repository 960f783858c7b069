"""Dashboard pages of the write side: facts (list, detail, curation), conflicts.

Every change goes through `facts.writer`; every change is recorded as an `AuditEvent`.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.cache import cache
from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import Count, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import trigger_client_event

from . import writer
from .access import ADMINISTER, CURATE
from .cardfile import Card, now_utc, parse_card
from .enums import CardStatus, Category
from .errors import CardParseError, InvalidId, RevisionConflict
from .forms import (
    CorrectForm,
    DeleteForm,
    ExpireForm,
    FactFilters,
    OptionalReasonForm,
    ResolveForm,
    ReviewByForm,
)
from .ids import check_fact_id
from .models import AuditEvent, Candidate, ExtractionRun, FactCard, FactRevision, FactUsage, ProfileSection
from .store import Bucket, get_store

PAGE_SIZE = 50
# Bounds staleness after changes that leave no trace in the fingerprint (a CLI reindex).
COUNTS_CACHE_SECONDS = 60

# --- small helpers shared by the dashboard views ------------------------------------


def actor_of(request: HttpRequest) -> str:
    return request.user.get_username()


def audit(
    request: HttpRequest,
    action: str,
    *,
    target: str = "",
    user_id: str = "",
    agent_name: str = "",
    reason: str = "",
    **details: Any,
) -> AuditEvent:
    return AuditEvent.objects.create(
        actor=actor_of(request),
        action=action,
        target=target,
        user_id=user_id or "",
        agent_name=agent_name or "",
        reason=reason,
        details=details,
    )


def page_of(request: HttpRequest, items: Any, number: int | None, per_page: int = PAGE_SIZE) -> Page:
    return Paginator(items, per_page).get_page(number or 1)


def query_without_page(data: dict[str, Any]) -> str:
    """The current filters as a query string (for pagination links that keep them)."""
    return urlencode({k: v for k, v in data.items() if k != "page" and v not in (None, "")})


def changed(response: HttpResponse, event: str = "factsChanged") -> HttpResponse:
    return trigger_client_event(response, event)


def scope_label(row: FactCard) -> str:
    if row.user_id:
        return f"{row.user_id} × {row.agent_name}"
    return f"project {row.project_id}"


def bucket_of(row: FactCard) -> Bucket:
    if row.user_id:
        return Bucket(user_id=row.user_id, agent_name=row.agent_name)
    return Bucket(project_id=row.project_id)


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


# --- overview counts ------------------------------------------------------------------


def counts_version() -> str:
    """A cheap fingerprint of everything the counts depend on (each an indexed max).

    Writes bump `updated_at`, deletions and reviews leave an audit event, rebuilds a row;
    so counts cached under this key are never stale, whichever process changed memory.
    """
    from django.db.models import Max

    latest = FactCard.objects.order_by("-updated_at").values_list("updated_at", flat=True).first()
    parts = [
        latest.isoformat() if latest else "-",
        str(Candidate.objects.aggregate(m=Max("pk"))["m"]),
        str(AuditEvent.objects.aggregate(m=Max("pk"))["m"]),
        str(ProfileSection.objects.aggregate(m=Max("pk"))["m"]),
    ]
    return "dashboard:overview-counts:" + ":".join(parts)


def overview_counts() -> dict[str, int]:
    key = counts_version()
    cached = cache.get(key)
    if cached is not None:
        return cached
    by_status = dict(FactCard.objects.values_list("status").annotate(n=Count("id")).order_by())
    users = set(FactCard.objects.exclude(user_id="").values_list("user_id", flat=True).distinct())
    users |= set(ProfileSection.objects.values_list("user_id", flat=True).distinct())
    agents = FactCard.objects.exclude(agent_name="").values("agent_name").distinct().count()
    projects = FactCard.objects.exclude(project_id="").values("project_id").distinct().count()
    counts = {
        "users": len(users),
        "agents": agents,
        "projects": projects,
        "active": by_status.get(CardStatus.ACTIVE.value, 0),
        "expired": by_status.get(CardStatus.EXPIRED.value, 0),
        "superseded": by_status.get(CardStatus.SUPERSEDED.value, 0),
        "to review": open_candidates().count(),
    }
    cache.set(key, counts, COUNTS_CACHE_SECONDS)
    return counts


def open_candidates() -> QuerySet[Candidate]:
    """What waits for a reviewer. The gate marks these `pending`: rejections (except pure
    duplicates of what is stored, which need nobody) and, in manual review mode, the
    accepted candidates held back from memory."""
    return Candidate.objects.filter(review_state=Candidate.ReviewState.PENDING)


# --- facts list -------------------------------------------------------------------------


def search_ids(query: str, *, user_id: str, agent_name: str, project_id: str) -> list[str] | None:
    """Fact ids matching `query` through the FTS index (None while the read side is missing)."""
    try:
        from retrieval.search import search
    except ImportError:
        return None
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
        if ids is None:
            rows = rows.filter(content__icontains=data["q"])
            note = "The search index is not available; matched the text directly."
        else:
            order = {fact_id: n for n, fact_id in enumerate(ids)}
            found = {row.id: row for row in rows.filter(id__in=ids)}
            return [
                found[i] for i in sorted(found, key=order.__getitem__)
            ], "Ranked by the search index (live cards only)."  # type: ignore[return-value]
    return rows.order_by("-updated_at", "id"), note


@require_GET
@login_required
def fact_list(request: HttpRequest) -> HttpResponse:
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
    template = "facts/list.html#rows" if request.htmx and request.htmx.target == "fact-rows" else "facts/list.html"
    return render(request, template, ctx)


# --- fact detail ------------------------------------------------------------------------


@dataclass
class Version:
    revision: int
    actor: str
    reason: str
    created_at: datetime
    text: str
    diff: list[tuple[str, str]]


# Every card revision bumps these two; the summary line shows them, the diff shows the change.
CARD_NOISE = ("updated_at:", "revision:")


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


def versions_of(fact_id: str) -> list[Version]:
    revisions = list(FactRevision.objects.filter(fact_id=fact_id).order_by("revision"))
    out: list[Version] = []
    previous = ""
    for rev in revisions:
        out.append(
            Version(
                rev.revision,
                rev.actor,
                rev.reason,
                rev.created_at,
                rev.text,
                diff_lines(previous, rev.text, CARD_NOISE),
            )
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
def fact_detail(request: HttpRequest, fact_id: str) -> HttpResponse:
    row = fact_or_404(fact_id)
    run = None
    if row.source_run_id.isdigit():
        run = ExtractionRun.objects.filter(pk=int(row.source_run_id)).first()
    usage = FactUsage.objects.filter(fact_id=row.id).first()
    ctx = {
        "fact": row,
        "scope": scope_label(row),
        "versions": versions_of(row.id),
        "chain": chain_of(row),
        "usage": usage,
        "run": run,
        "evidence_row": evidence_row(run, row.source_message_id, row.evidence_text) if run else None,
        "correct_form": correct_form_for(row),
        "expire_form": ExpireForm(),
        "review_form": ReviewByForm(initial={"review_by": row.review_by.date() if row.review_by else None}),
        "reason_form": OptionalReasonForm(),
        "now": timezone.now(),
    }
    return render(request, "facts/detail.html", ctx)


def correct_form_for(row: FactCard) -> CorrectForm:
    """The Correct form, filled from the card file (what a correction will be checked
    against: its revision), or from the mirror row when the file cannot be read."""
    try:
        card: Card | FactCard | None = get_store().read_card(bucket_of(row), row.id)
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
            return {"role": item.get("role", ""), "before": before, "mark": found, "after": after}
    return None


# --- fact actions -------------------------------------------------------------------


def apply_change(
    request: HttpRequest,
    row: FactCard,
    change: Callable[[Card], Card],
    *,
    action: str,
    reason: str,
    done: str,
    expected_revision: int | None = None,
    **details: Any,
) -> HttpResponse:
    try:
        card = writer.update_card(
            bucket_of(row), row.id, change, actor=actor_of(request), reason=reason, expected_revision=expected_revision
        )
    except (RevisionConflict, CardParseError, InvalidId, ValueError) as exc:
        messages.error(request, f"Nothing was changed: {exc}")
        return redirect("fact_detail", fact_id=row.id)
    audit(
        request,
        action,
        target=row.id,
        user_id=row.user_id,
        agent_name=row.agent_name,
        reason=reason,
        revision=card.revision,
        **details,
    )
    messages.success(request, done)
    response = redirect("fact_detail", fact_id=row.id)
    return changed(response)


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def fact_correct(request: HttpRequest, fact_id: str) -> HttpResponse:
    row = fact_in_scope(request, fact_id)
    form = CorrectForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not corrected: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
        return redirect("fact_detail", fact_id=row.id)
    data = form.cleaned_data

    def change(card: Card) -> Card:
        return card.model_copy(
            update={
                "content": data["content"],
                "key": data["key"],
                "category": Category(data["category"]),
                "confidence": data["confidence"],
            }
        )

    return apply_change(
        request,
        row,
        change,
        action=AuditEvent.Action.CORRECT,
        reason=data["reason"],
        done="Corrected: a new revision was written.",
        expected_revision=data.get("revision"),
    )


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def fact_expire(request: HttpRequest, fact_id: str) -> HttpResponse:
    row = fact_in_scope(request, fact_id)
    form = ExpireForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not expired: check the date.")
        return redirect("fact_detail", fact_id=row.id)
    at = form.cleaned_data.get("at")
    now = now_utc()
    if at is not None and at.tzinfo is None:
        at = at.replace(tzinfo=UTC)

    def change(card: Card) -> Card:
        if at is None or at <= now:
            return card.model_copy(update={"status": CardStatus.EXPIRED, "expires_at": at or now})
        return card.model_copy(update={"expires_at": at})

    when = "now" if at is None or at <= now else at.isoformat()
    return apply_change(
        request,
        row,
        change,
        action=AuditEvent.Action.EXPIRE,
        reason=form.cleaned_data["reason"],
        done=f"Expires {when}.",
        at=when,
    )


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def fact_restore(request: HttpRequest, fact_id: str) -> HttpResponse:
    row = fact_in_scope(request, fact_id)
    form = OptionalReasonForm(request.POST)
    form.is_valid()

    def change(card: Card) -> Card:
        return card.model_copy(update={"status": CardStatus.ACTIVE, "expires_at": None, "superseded_by": None})

    return apply_change(
        request,
        row,
        change,
        action=AuditEvent.Action.RESTORE,
        reason=form.cleaned_data.get("reason", ""),
        done="Restored: the card is active again.",
    )


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def fact_review_by(request: HttpRequest, fact_id: str) -> HttpResponse:
    row = fact_in_scope(request, fact_id)
    form = ReviewByForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not saved: check the date.")
        return redirect("fact_detail", fact_id=row.id)
    day = form.cleaned_data.get("review_by")
    at = datetime(day.year, day.month, day.day, tzinfo=UTC) if day else None

    def change(card: Card) -> Card:
        return card.model_copy(update={"review_by": at})

    return apply_change(
        request,
        row,
        change,
        action=AuditEvent.Action.REVIEW_BY,
        reason=form.cleaned_data.get("reason", ""),
        done=f"Review-by date {'set to ' + day.isoformat() if day else 'cleared'}.",
        review_by=day.isoformat() if day else None,
    )


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def fact_revert(request: HttpRequest, fact_id: str, revision: int) -> HttpResponse:
    row = fact_in_scope(request, fact_id)
    old = FactRevision.objects.filter(fact_id=row.id, revision=revision).first()
    if old is None:
        raise Http404("no such revision")
    try:
        target = parse_card(old.text, Path(row.path))
    except CardParseError as exc:
        messages.error(request, f"Revision {revision} cannot be read: {exc.message}")
        return redirect("fact_detail", fact_id=row.id)
    form = OptionalReasonForm(request.POST)
    form.is_valid()
    reason = form.cleaned_data.get("reason") or f"revert to revision {revision}"

    def change(card: Card) -> Card:
        keep = {"id": card.id, "revision": card.revision, "created_at": card.created_at, "updated_at": card.updated_at}
        return target.model_copy(update=keep)

    return apply_change(
        request,
        row,
        change,
        action=AuditEvent.Action.REVERT,
        reason=reason,
        done=f"Reverted to revision {revision}.",
        to_revision=revision,
    )


def erase(request: HttpRequest, rows: Iterable[FactCard], *, reason: str) -> int:
    """Delete cards for good: files, mirror rows and their stored revisions (the text)."""
    store = get_store()
    ops = []
    for row in rows:
        card = store.read_card(bucket_of(row), row.id)
        if card is not None:
            ops.append(writer.Delete(card))
    result = writer.commit(ops, actor=actor_of(request), reason=reason)
    ids = [row.id for row in rows]
    FactRevision.objects.filter(fact_id__in=ids).delete()
    # A mirror row without a file (drift) goes too.
    FactCard.objects.filter(id__in=ids).delete()
    return max(len(result.deleted), len(ids))


@login_required
@permission_required(ADMINISTER, raise_exception=True)
@require_http_methods(["GET", "POST"])
def fact_delete(request: HttpRequest, fact_id: str) -> HttpResponse:
    if request.method == "GET":
        row = fact_or_404(fact_id)
        return render(request, "facts/delete.html", {"fact": row, "scope": scope_label(row), "form": DeleteForm()})
    row = fact_in_scope(request, fact_id)
    form = DeleteForm(request.POST)
    if not form.is_valid() or form.cleaned_data["confirm"].strip() != row.id:
        messages.error(request, "Type the fact id to confirm the deletion.")
        return redirect("fact_delete", fact_id=row.id)
    reason = form.cleaned_data.get("reason", "")
    erase(request, [row], reason=reason)
    # The audit keeps that it happened and where, never the content.
    audit(
        request,
        AuditEvent.Action.DELETE,
        target=row.id,
        user_id=row.user_id,
        agent_name=row.agent_name,
        reason=reason,
        project_id=row.project_id,
        key=row.key,
    )
    messages.success(request, f"{row.id} was deleted permanently.")
    return changed(redirect("fact_list"))


# --- conflicts --------------------------------------------------------------------------


def norm_key(key: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in key.strip().lower()).strip("_")


@dataclass
class Conflict:
    scope: str
    user_id: str
    agent_name: str
    project_id: str
    key: str
    kind: str  # "same key" or "contradicts a correction"
    cards: list[FactCard]


def find_conflicts(limit: int = 100) -> list[Conflict]:
    """Live cards of one bucket whose keys collide (exactly, or after normalising case and
    punctuation), and cards that an accepted correction with the same key contradicts."""
    dupes = (
        FactCard.objects.filter(status=CardStatus.ACTIVE)
        .values("user_id", "agent_name", "project_id", "key")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .order_by()[:limit]
    )
    groups: dict[tuple[str, str, str, str], list[FactCard]] = defaultdict(list)
    for d in dupes:
        for row in FactCard.objects.filter(
            status=CardStatus.ACTIVE,
            user_id=d["user_id"],
            agent_name=d["agent_name"],
            project_id=d["project_id"],
            key=d["key"],
        ):
            groups[(row.user_id, row.agent_name, row.project_id, norm_key(row.key))].append(row)
    # Near-collisions and corrections: only the buckets that have a live correction.
    corrections = (
        FactCard.objects.filter(status=CardStatus.ACTIVE, category=Category.CORRECTION)
        .values_list("user_id", "agent_name", "project_id")
        .distinct()[:limit]
    )
    correction_keys: set[tuple[str, str, str, str]] = set()
    for user_id, agent_name, project_id in corrections:
        live = FactCard.objects.filter(
            status=CardStatus.ACTIVE, user_id=user_id, agent_name=agent_name, project_id=project_id
        ).only("id", "key", "category", "content", "confidence", "created_at", "user_id", "agent_name", "project_id")[
            :2000
        ]
        by_key: dict[str, list[FactCard]] = defaultdict(list)
        for row in live:
            by_key[norm_key(row.key)].append(row)
            if row.category == Category.CORRECTION:
                correction_keys.add((user_id, agent_name, project_id, norm_key(row.key)))
        for nk, rows in by_key.items():
            if len(rows) > 1:
                bucket_key = (user_id, agent_name, project_id, nk)
                known = {r.id for r in groups.get(bucket_key, [])}
                groups[bucket_key].extend(r for r in rows if r.id not in known)
    out = []
    for (user_id, agent_name, project_id, nk), rows in groups.items():
        rows.sort(key=lambda r: (r.created_at, r.id))
        kind = "contradicts a correction" if (user_id, agent_name, project_id, nk) in correction_keys else "same key"
        scope = f"{user_id} × {agent_name}" if user_id else f"project {project_id}"
        out.append(Conflict(scope, user_id, agent_name, project_id, nk, kind, rows))
    return out[:limit]


def cached_conflicts() -> tuple[list[Conflict], list[FactCard]]:
    """Conflicts and overdue reviews. Both read every live card (review_by has no index:
    about 0.3 s at 100k cards), so they are kept under the same fingerprint as the counts
    and any change recomputes them; the clock moving on is picked up within the TTL."""
    key = counts_version().replace("overview-counts", "conflicts")
    found = cache.get(key)
    if found is None:
        now = timezone.now()
        overdue = list(
            FactCard.objects.filter(status=CardStatus.ACTIVE, review_by__lte=now).order_by("review_by")[:200]
        )
        found = (find_conflicts(), overdue)
        cache.set(key, found, COUNTS_CACHE_SECONDS)
    return found


@require_GET
@login_required
def conflicts(request: HttpRequest) -> HttpResponse:
    found, overdue = cached_conflicts()
    return render(request, "facts/conflicts.html", {"conflicts": found, "overdue": overdue, "now": timezone.now()})


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def resolve_conflict(request: HttpRequest) -> HttpResponse:
    """Keep one card; the others are superseded by it (their history stays browsable)."""
    form = ResolveForm(request.POST)
    if not form.is_valid():
        return HttpResponseBadRequest("bad resolution")
    keep = fact_or_404(form.cleaned_data["keep"])
    other_ids = [i.strip() for i in form.cleaned_data["others"].split(",") if i.strip()]
    others = list(FactCard.objects.filter(id__in=other_ids).exclude(id=keep.id))
    if len(others) != len(set(other_ids) - {keep.id}) or any(bucket_of(o) != bucket_of(keep) for o in others):
        raise Http404("cards of another scope")
    reason = form.cleaned_data.get("reason") or f"conflict resolved in favour of {keep.id}"
    store = get_store()
    puts = []
    for row in others:
        card = store.read_card(bucket_of(row), row.id)
        if card is not None and card.status == CardStatus.ACTIVE:
            updated = card.model_copy(
                update={"status": CardStatus.SUPERSEDED, "superseded_by": keep.id, "updated_at": now_utc()}
            )
            puts.append(writer.Put(updated, card.revision))
    try:
        writer.commit(puts, actor=actor_of(request), reason=reason)
    except RevisionConflict as exc:
        messages.error(request, f"Nothing was changed: {exc}")
        return redirect("conflicts")
    audit(
        request,
        AuditEvent.Action.RESOLVE,
        target=keep.id,
        user_id=keep.user_id,
        agent_name=keep.agent_name,
        reason=reason,
        superseded=[r.id for r in others],
    )
    messages.success(request, f"Kept {keep.id}; {len(puts)} card(s) superseded.")
    return changed(redirect("conflicts"))
