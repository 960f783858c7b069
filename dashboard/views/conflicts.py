"""Conflicts page: cards of one bucket that claim the same attribute (found by
`facts.curation.conflicts`) and cards past their review-by date; a curator keeps one card and
the others are superseded by it."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.cache import cache
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dashboard.confirm import confirm_first
from dashboard.forms.memory import ResolveForm
from dashboard.helpers import actor_of, changed, fact_or_404
from dashboard.views.overview import COUNTS_CACHE_SECONDS, counts_version
from facts.access import CURATE
from facts.curation import cards
from facts.curation.conflicts import Conflict, find_conflicts
from facts.enums import CardStatus
from facts.models import FactCard
from facts.storage.errors import RevisionConflict


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
    return render(request, "dashboard/conflicts.html", {"conflicts": found, "overdue": overdue, "now": timezone.now()})


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
    if len(others) != len(set(other_ids) - {keep.id}) or any(o.bucket != keep.bucket for o in others):
        raise Http404("cards of another scope")
    asked = confirm_first(
        request,
        question=f"Keep “{keep.content[:120]}” and supersede the {len(others)} other card(s)?",
        button="Keep this one",
        cancel=reverse("conflicts"),
    )
    if asked:
        return asked
    reason = form.cleaned_data.get("reason") or f"conflict resolved in favour of {keep.id}"
    try:
        superseded = cards.resolve_conflict(keep, others, actor=actor_of(request), reason=reason)
    except RevisionConflict as exc:
        messages.error(request, f"Nothing was changed: {exc}")
        return redirect("conflicts")
    messages.success(request, f"Kept {keep.id}; {superseded} card(s) superseded.")
    return changed(redirect("conflicts"))
