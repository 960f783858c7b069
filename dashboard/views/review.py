"""The review queue: candidates with their verdicts, evidence in its conversation, and
the reviewer's approve / correct-and-approve / dismiss (single and bulk). The decisions,
and which candidates may be reviewed, are `facts.curation.review`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.db import connection
from django.db.models import QuerySet
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from dashboard.forms.common import day_end, day_start
from dashboard.forms.memory import ApproveForm, BulkForm, CandidateFilters, DismissForm, RestoreForm, SelectedForm
from dashboard.helpers import HtmxHttpRequest, actor_of, changed, flash_errors, page_of, query_without_page, said_at_of
from dashboard.labels import REASON_HELP
from dashboard.views.overview import open_candidates
from facts.access import CURATE
from facts.curation.review import (
    REVIEWABLE,
    apply_candidate,
    dismiss_candidate,
    is_reviewable,
    not_reviewable_reason,
    restore_candidate,
)
from facts.enums import CardStatus
from facts.models import Candidate, FactCard
from facts.storage.errors import LockTimeout, RevisionConflict

BULK_LIMIT = 500
REVIEWED = (Candidate.ReviewState.APPROVED, Candidate.ReviewState.DISMISSED)
PAST = {"approve": "Approved", "dismiss": "Dismissed"}
# A flash message's extra tag naming the dismissed candidates its Undo restores
# (read by the `undo_ids` template filter).
UNDO_TAG = "undo-dismiss:"


def with_reason(rows: QuerySet[Candidate], code: str) -> QuerySet[Candidate]:
    if connection.vendor == "postgresql":
        return rows.filter(reasons__contains=[code])
    # SQLite has no JSON containment lookup; json_each keeps it exact (no substring hits).
    table = Candidate._meta.db_table
    return rows.extra(
        where=[f"EXISTS (SELECT 1 FROM json_each({table}.reasons) WHERE json_each.value = %s)"], params=[code]
    )


def filtered_candidates(data: dict[str, Any]) -> QuerySet[Candidate]:
    state = data.get("state") or "open"
    if state == "open":
        rows = open_candidates()
    elif state == "all":
        rows = Candidate.objects.all()
    elif state == "reviewed":
        rows = Candidate.objects.filter(review_state__in=REVIEWED)
    else:
        rows = Candidate.objects.filter(review_state=state)
    if data.get("verdict"):
        rows = rows.filter(verdict=data["verdict"])
    if data.get("reason"):
        rows = with_reason(rows, data["reason"])
    if data.get("user"):
        rows = rows.filter(user_id=data["user"])
    if data.get("agent"):
        rows = rows.filter(agent_name=data["agent"])
    if data.get("kind"):
        rows = rows.filter(kind=data["kind"])
    if data.get("category"):
        rows = rows.filter(category=data["category"])
    if data.get("since"):
        rows = rows.filter(created_at__gte=day_start(data["since"]))
    if data.get("until"):
        rows = rows.filter(created_at__lte=day_end(data["until"]))
    return rows.order_by("-created_at", "-id")


@require_GET
@login_required
def review_queue(request: HtmxHttpRequest) -> HttpResponse:
    form = CandidateFilters(request.GET)
    if form.is_valid():
        rows = filtered_candidates(form.cleaned_data)
        page = page_of(request, rows, form.cleaned_data.get("page"), per_page=25)
        query = query_without_page(form.cleaned_data)
    else:
        page = page_of(request, Candidate.objects.none(), 1)
        query = ""
    ctx = {
        "form": form,
        "page": page,
        "query": query,
        "next": request.get_full_path(),
        "reason_help": list(REASON_HELP.items()),
    }
    if request.htmx and request.htmx.target == "candidate-rows":
        return render(request, "dashboard/review_queue.html#rows", ctx)
    return render(request, "dashboard/review_queue.html", ctx)


@require_GET
@login_required
def open_count(request: HtmxHttpRequest) -> HttpResponse:
    """The badge in the navigation; refreshed by the `candidatesChanged` event."""
    return render(request, "dashboard/review_queue.html#badge", {"open_count": open_candidates().count()})


@dataclass
class Segment:
    text: str
    mark: bool = False


@dataclass
class ConversationRow:
    id: str
    role: str
    segments: list[Segment]
    is_evidence: bool
    said_at: datetime | None = None


def conversation(candidate: Candidate) -> tuple[list[ConversationRow], bool]:
    """The filtered rows of the candidate's run, the evidence span marked.

    Returns the rows and whether the evidence text was found in the named message.
    """
    out: list[ConversationRow] = []
    found = False
    for item in candidate.run.filtered_rows or []:
        if not isinstance(item, dict):
            continue
        content = str(item.get("content", ""))
        mid = str(item.get("id", ""))
        is_evidence = mid == candidate.evidence_message_id and bool(candidate.evidence_message_id)
        segments = [Segment(content)]
        needle = candidate.evidence_text
        if is_evidence and needle and needle in content:
            start = content.index(needle)
            segments = [Segment(content[:start]), Segment(needle, True), Segment(content[start + len(needle) :])]
            found = True
        out.append(ConversationRow(mid, str(item.get("role", "")), segments, is_evidence, said_at_of(item)))
    return out, found


def existing_card(candidate: Candidate) -> FactCard | None:
    """The live card of the same key in the candidate's bucket: what approval would
    replace (unless that card was said after the candidate: `facts.judging.plan.Plan.add_fact`)."""
    if candidate.kind != Candidate.Kind.FACT or not candidate.key:
        return None
    rows = FactCard.objects.filter(key=candidate.key, status=CardStatus.ACTIVE)
    if candidate.scope == "project" and candidate.project_id:
        rows = rows.filter(project_id=candidate.project_id, user_id="")
    else:
        rows = rows.filter(user_id=candidate.user_id, agent_name=candidate.agent_name)
    return rows.order_by("-updated_at").first()


def candidate_or_404(pk: int) -> Candidate:
    candidate = Candidate.objects.select_related("run", "reviewed_by").filter(pk=pk).first()
    if candidate is None:
        raise Http404("no such candidate")
    return candidate


@require_GET
@login_required
def candidate_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    candidate = candidate_or_404(pk)
    rows, found = conversation(candidate)
    initial = {
        "content": candidate.content,
        "key": candidate.key,
        "category": candidate.category,
        "confidence": candidate.confidence,
    }
    ctx = {
        "c": candidate,
        "rows": rows,
        "evidence_found": found,
        "existing": existing_card(candidate),
        "approve_form": ApproveForm(initial=initial),
        "dismiss_form": DismissForm(),
        "reviewable": is_reviewable(candidate),
    }
    return render(request, "dashboard/candidate.html", ctx)


def back(request: HtmxHttpRequest, default: str) -> str:
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}):
        return target
    return default


def approve_one(
    request: HtmxHttpRequest, candidate: Candidate, note: str, overrides: dict[str, Any] | None
) -> str | None:
    """The gate writes the card, records the review and the audit event."""
    return apply_candidate(candidate, actor=actor_of(request), note=note, overrides=overrides or None)


def dismiss_one(request: HtmxHttpRequest, candidate: Candidate, note: str) -> None:
    dismiss_candidate(candidate, actor=actor_of(request), note=note)


def to_page(request: HtmxHttpRequest, url: str) -> HttpResponse:
    """Where an action that could not be done sends the reviewer: the candidate's page
    (with htmx, a full navigation, so the page does not land inside a table row)."""
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


def row_response(request: HtmxHttpRequest, candidate: Candidate, default: str) -> HttpResponse:
    if request.htmx:
        candidate = candidate_or_404(candidate.pk)
        response = render(request, "dashboard/review_queue.html#row", {"c": candidate, "next": back(request, default)})
        return changed(changed(response, "candidatesChanged"), "factsChanged")
    return redirect(back(request, default))


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def candidate_approve(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    candidate = candidate_or_404(pk)
    detail = reverse("candidate_detail", args=[pk])
    if not is_reviewable(candidate):
        messages.error(request, not_reviewable_reason(candidate))
        return to_page(request, detail)
    form = ApproveForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not approved: approving overrides the gate, so write why.")
        if request.htmx:
            return row_response(request, candidate, detail)
        return redirect(detail)
    overrides = form.overrides(candidate)
    try:
        fact_id = approve_one(request, candidate, form.cleaned_data["note"].strip(), overrides)
    except (ValueError, RevisionConflict, LockTimeout) as exc:  # ReviewError says which field is wrong
        messages.error(request, f"Not approved: {exc}")
        return to_page(request, detail)
    messages.success(
        request, f"Approved{' with corrections' if overrides else ''}: card {fact_id or '(none)'} written."
    )
    return row_response(request, candidate, detail)


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def candidate_dismiss(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    candidate = candidate_or_404(pk)
    detail = reverse("candidate_detail", args=[pk])
    if not is_reviewable(candidate):
        messages.error(request, not_reviewable_reason(candidate))
        return to_page(request, detail)
    form = DismissForm(request.POST)
    form.is_valid()
    dismiss_one(request, candidate, form.cleaned_data.get("note", ""))
    # With htmx the row itself says so and shows Undo (a flash message would only turn up
    # on the next full page, after the fact); a full page gets it on the flash message.
    if not request.htmx:
        messages.success(request, "Dismissed.", extra_tags=f"{UNDO_TAG}{candidate.pk}")
    return row_response(request, candidate, detail)


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def candidates_restore(request: HtmxHttpRequest) -> HttpResponse:
    """Undo dismissals: the candidates wait for review again (each audited as a restore)."""
    form = RestoreForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Nothing to undo.")
        return redirect("review_queue")
    rows = list(Candidate.objects.filter(pk__in=form.cleaned_data["ids"]).select_related("run"))
    restored = sum(restore_candidate(c, actor=actor_of(request)) for c in rows)
    skipped = len(form.cleaned_data["ids"]) - restored
    if request.htmx and len(rows) == 1:
        return row_response(request, rows[0], reverse("review_queue"))  # the row shows its state
    messages.success(
        request,
        f"Dismissal undone: {restored} candidate(s) wait for review again."
        + (f" {skipped} were no longer dismissed." if skipped else ""),
    )
    return changed(redirect(back(request, reverse("review_queue"))), "candidatesChanged")


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def selected_review(request: HtmxHttpRequest) -> HttpResponse:
    """Approve or dismiss the rows ticked in the queue (only those still open)."""
    form = SelectedForm(request.POST)
    queue = back(request, reverse("review_queue"))
    if not form.is_valid():
        flash_errors(request, "Nothing done:", form, label=None)
        return redirect(queue)
    data = form.cleaned_data
    rows = list(Candidate.objects.filter(REVIEWABLE, pk__in=data["ids"]).select_related("run").order_by("pk"))
    note = (data.get("note") or "").strip()
    done: list[int] = []
    failed = 0
    for candidate in rows:
        try:
            if data["action"] == "approve":
                approve_one(request, candidate, note, None)
            else:
                dismiss_one(request, candidate, note)
            done.append(candidate.pk)
        except (ValueError, RevisionConflict, LockTimeout):
            failed += 1
    skipped = len(data["ids"]) - len(rows)
    text = f"{PAST[data['action']]} {len(done)} selected candidate(s)"
    text += (f"; {failed} failed" if failed else "") + (f"; {skipped} were no longer open" if skipped else "") + "."
    tag = f"{UNDO_TAG}{','.join(map(str, done))}" if data["action"] == "dismiss" and done else ""
    messages.success(request, text, extra_tags=tag)
    return changed(changed(redirect(queue), "candidatesChanged"), "factsChanged")


@login_required
@permission_required(CURATE, raise_exception=True)
def bulk_review(request: HtmxHttpRequest) -> HttpResponse:
    """GET: a dry run (how many would be approved or dismissed). POST with the count the
    reviewer saw: do it, unless the queue changed in between."""
    form = BulkForm(request.POST if request.method == "POST" else request.GET)
    if not form.is_valid():
        return render(request, "dashboard/bulk.html", {"form": form, "count": None}, status=400)
    data = form.cleaned_data
    rows = filtered_candidates({**data, "state": data.get("state") or "open"})
    rows = rows.filter(REVIEWABLE)
    count = rows.count()
    if request.method != "POST" or not data.get("confirm"):
        sample = list(rows[:10])
        return render(
            request, "dashboard/bulk.html", {"form": form, "count": count, "sample": sample, "limit": BULK_LIMIT}
        )
    if data.get("expected") != count:
        messages.error(request, f"The queue changed: {count} candidate(s) match now. Check the dry run again.")
        return render(
            request,
            "dashboard/bulk.html",
            {
                "form": BulkForm(initial={**data, "confirm": False}),
                "count": count,
                "sample": list(rows[:10]),
                "limit": BULK_LIMIT,
            },
        )
    done = failed = 0
    note = (data.get("note") or "").strip()
    for candidate in rows.select_related("run")[:BULK_LIMIT]:
        try:
            if data["action"] == "approve":
                approve_one(request, candidate, note, None)
            else:
                dismiss_one(request, candidate, note)
            done += 1
        except (ValueError, RevisionConflict, LockTimeout):
            failed += 1
    messages.success(
        request, f"{PAST[data['action']]} {done} candidate(s)" + (f"; {failed} failed" if failed else "") + "."
    )
    response = redirect(
        reverse("review_queue")
        + "?"
        + query_without_page({k: v for k, v in data.items() if k in CandidateFilters.base_fields})
    )
    return changed(response, "candidatesChanged")
