"""Gate analytics: how often reviewers overturn each rejection reason, what another
threshold or review mode would have decided (a backtest, writing nothing), applying a
new threshold (an audited admin action), and what an agent was shown at a moment
(the injection log)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.db.models import Count, Q, QuerySet
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dashboard.forms.common import day_end, day_start
from dashboard.forms.reading import AgreementFilters, BacktestForm, InjectionsForm, ThresholdForm
from dashboard.helpers import HtmxHttpRequest, actor_of, flash_errors
from dashboard.views.review import filtered_candidates, with_reason
from facts.access import ADMINISTER
from facts.enums import HISTORY_SECTIONS, USER_SECTIONS
from facts.injections import seen_at
from facts.judging.backtest import apply_threshold, backtest
from facts.judging.gate import REASON_CODES
from facts.judging.runs import threshold_in_force
from facts.models import Candidate, GateSettings, Injection

# A backtest replays about 1,000 runs a second: the page stops at the latest ones
# (`manage.py backtest` has no limit).
PAGE_MAX_RUNS = 3000

APPROVED, DISMISSED, PENDING = (
    Candidate.ReviewState.APPROVED,
    Candidate.ReviewState.DISMISSED,
    Candidate.ReviewState.PENDING,
)


@dataclass
class Agreement:
    """Rejections of one reason code (or one agent) and what reviewers made of them."""

    label: str
    overturned: int
    upheld: int
    open: int
    links: dict[str, str]

    @property
    def reviewed(self) -> int:
        return self.overturned + self.upheld

    @property
    def overturn_rate(self) -> int | None:
        return round(100 * self.overturned / self.reviewed) if self.reviewed else None


def _rejections(data: dict[str, Any]) -> QuerySet[Candidate]:
    """The rejections behind the numbers: the review queue's own filter (every state), so
    a number and the queue it links to always count the same rows. Unordered: the
    queue's order would join the per-agent GROUP BY."""
    return filtered_candidates({**data, "state": "all", "verdict": Candidate.Verdict.REJECTED}).order_by()


_COUNTS = {
    "overturned": Count("pk", filter=Q(review_state=APPROVED)),
    "upheld": Count("pk", filter=Q(review_state=DISMISSED)),
    "open": Count("pk", filter=Q(review_state=PENDING)),
}


def _links(data: dict[str, Any], **narrow: str) -> dict[str, str]:
    """The review queue filtered to the candidates behind each number."""
    base = {"verdict": "rejected", **{k: str(v) for k, v in data.items() if v}, **narrow}
    queue = reverse("review_queue")
    states = {"reviewed": "reviewed", "overturned": "approved", "upheld": "dismissed", "open": "pending"}
    return {name: f"{queue}?{urlencode({**base, 'state': state})}" for name, state in states.items()}


def agreement(data: dict[str, Any]) -> tuple[list[Agreement], list[Agreement]]:
    """Per reason code, then per agent: overturned (approved), upheld (dismissed), open."""
    rows = _rejections(data)
    by_reason = []
    for code in REASON_CODES:
        counts = with_reason(rows, code).aggregate(**_COUNTS)
        if any(counts.values()):
            by_reason.append(Agreement(code, **counts, links=_links(data, reason=code)))
    by_agent = [
        Agreement(
            row["agent_name"], row["overturned"], row["upheld"], row["open"], _links(data, agent=row["agent_name"])
        )
        for row in cast(list[dict[str, Any]], rows.values("agent_name").annotate(**_COUNTS).order_by("agent_name"))
    ]
    return by_reason, by_agent


@require_GET
@login_required
def gate_overview(request: HtmxHttpRequest) -> HttpResponse:
    form = AgreementFilters(request.GET)
    by_reason: list[Agreement] = []
    by_agent: list[Agreement] = []
    if form.is_valid():
        data = {k: v for k, v in form.cleaned_data.items() if v}
        by_reason, by_agent = agreement(data)
    ctx = {
        "form": form,
        "by_reason": by_reason,
        "by_agent": by_agent,
        "threshold": threshold_in_force(),
        "applied": GateSettings.objects.filter(pk=1).first(),
        "threshold_form": ThresholdForm(initial={"threshold": threshold_in_force()}),
        "can_apply": request.user.has_perm(ADMINISTER),
    }
    if request.htmx and request.htmx.target == "agreement":
        return render(request, "dashboard/gate.html#agreement", ctx)
    return render(request, "dashboard/gate.html", ctx)


@require_GET
@login_required
def gate_backtest(request: HtmxHttpRequest) -> HttpResponse:
    """Replays only when the form changes a setting: the default answer would be zero flips."""
    form = BacktestForm(request.GET)
    report = None
    if form.is_valid() and form.changes_something:
        data = form.cleaned_data
        report = backtest(
            threshold=data.get("threshold"),
            review_mode=data.get("review_mode") or None,
            since=day_start(data.get("since")),
            until=day_end(data.get("until")),
            user=data.get("user", ""),
            agent=data.get("agent", ""),
            max_runs=PAGE_MAX_RUNS,
        ).as_dict()
    ctx = {
        "form": form,
        "report": report,
        "max_runs": PAGE_MAX_RUNS,
        "capped": report is not None and report["runs"] + len(report["unreplayable_runs"]) >= PAGE_MAX_RUNS,
        "threshold": threshold_in_force(),
        "threshold_form": ThresholdForm(
            initial={"threshold": form.cleaned_data.get("threshold")} if form.is_valid() else {}
        ),
        "can_apply": request.user.has_perm(ADMINISTER),
    }
    return render(request, "dashboard/backtest.html", ctx)


@login_required
@permission_required(ADMINISTER, raise_exception=True)
@require_POST
def gate_threshold(request: HtmxHttpRequest) -> HttpResponse:
    form = ThresholdForm(request.POST)
    if not form.is_valid():
        flash_errors(request, "Not applied:", form, label=None)
        return redirect("gate_overview")
    before = apply_threshold(
        form.cleaned_data["threshold"], actor=actor_of(request), reason=form.cleaned_data["reason"]
    )
    messages.success(
        request,
        f"The gate's threshold is now {form.cleaned_data['threshold']:g} (was {before:g}) for runs judged from now on.",
    )
    return redirect("gate_overview")


@require_GET
@login_required
def injections(request: HtmxHttpRequest) -> HttpResponse:
    """What the agent saw at a moment, from the injection log and the card revisions."""
    form = InjectionsForm(request.GET or None)
    seen = searched = None
    profile: list[tuple[str, str]] = []
    recent: list[Injection] = []
    at = None
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        at = data.get("at")
        # A moment typed (or linked) to the second covers that whole second.
        at = at.replace(microsecond=999999) if at is not None else timezone.now()
        seen = seen_at(data["user"], data.get("agent", ""), at)
        searched = seen_at(data["user"], data.get("agent", ""), at, kind=Injection.Kind.SEARCH)
        if seen.profile is not None:
            profile = [
                (name, seen.profile.section(name).summary)
                for name in (*USER_SECTIONS, *HISTORY_SECTIONS)
                if seen.profile.section(name).summary
            ]
        query = Injection.objects.filter(user_id=data["user"], served_at__lte=at)
        if data.get("agent"):
            query = query.filter(agent_name=data["agent"])
        recent = list(query.annotate(cards=Count("facts")).order_by("-served_at", "-pk")[:20])
    ctx = {
        "form": form,
        "seen": seen,
        "searched": searched,
        "profile": profile,
        "recent": recent,
        "at": at,
        "days": settings.MEMORY_INJECTION_LOG_DAYS,
    }
    return render(request, "dashboard/injections.html", ctx)
