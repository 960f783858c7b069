"""The people whose memory is held: `/users/` (search, what is held about each) and
`/users/<id>/` (one person: profile and its versions, facts by agent and project,
conversations, recent runs and candidates, what was done about them).

The user id travels in the path (`<path:>`: ids may hold `/`); it is checked the way the
store names folders and must name someone memory holds something about, otherwise the
page is a 404. Export and erase are the existing admin pages (`export.py`, `people.py`).
The pickers (`pick_users`, `pick_agents`) answer the autocomplete of every user and
agent field with `<option>`s.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from itertools import groupby
from typing import Any, cast

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Max, Min, Q
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_GET

from dashboard.forms.people import PickForm, UsersFilter
from dashboard.helpers import HtmxHttpRequest, page_of, query_without_page
from facts.enums import CardStatus
from facts.erasure.guard import running_for
from facts.intake.people import PersonError, person_id
from facts.models import (
    AuditEvent,
    Candidate,
    ExtractionRun,
    FactCard,
    Injection,
    ProfileRevision,
    ProfileSection,
    Turn,
)

RECENT = 20
SHOWN_FACTS = 500
PICKER_OPTIONS = 15


@dataclass
class UserRow:
    user_id: str
    active: int = 0
    expired: int = 0
    pending: int = 0
    threads: int = 0
    last: datetime | None = None

    def seen(self, when: datetime | None) -> None:
        if when is not None and (self.last is None or when > self.last):
            self.last = when


def _user_rows(q: str) -> list[UserRow]:
    """One row per person, counted in four grouped queries (not one query per person)."""
    match = Q(user_id__icontains=q) if q else Q()
    rows: dict[str, UserRow] = {}

    def row(user_id: str) -> UserRow:
        return rows.setdefault(user_id, UserRow(user_id))

    for counts in (
        FactCard.objects.filter(match)
        .exclude(user_id="")
        .values("user_id")
        .annotate(
            active=Count("id", filter=Q(status=CardStatus.ACTIVE)),
            expired=Count("id", filter=Q(status=CardStatus.EXPIRED)),
            last=Max("updated_at"),
        )
        .order_by()
    ):
        target = row(counts["user_id"])
        target.active, target.expired = counts["active"], counts["expired"]
        target.seen(counts["last"])
    for waiting in (
        Candidate.objects.filter(match)
        .values("user_id")
        .annotate(pending=Count("id", filter=Q(review_state=Candidate.ReviewState.PENDING)), last=Max("created_at"))
        .order_by()
    ):
        target = row(waiting["user_id"])
        target.pending = waiting["pending"]
        target.seen(waiting["last"])
    # Thread ids are chosen by each agent, so a thread is an (agent, thread) pair.
    threads: dict[str, set[tuple[str, str]]] = {}
    for turn in (
        Turn.objects.filter(match)
        .values("user_id", "agent_name", "thread_id")
        .annotate(last=Max("received_at"))
        .order_by()
    ):
        threads.setdefault(turn["user_id"], set()).add((turn["agent_name"], turn["thread_id"]))
        row(turn["user_id"]).seen(turn["last"])
    for user_id, pairs in threads.items():
        rows[user_id].threads = len(pairs)
    for section in ProfileSection.objects.filter(match).values("user_id").annotate(last=Max("updated_at")).order_by():
        row(section["user_id"]).seen(section["last"])
    # Most recently active first; people with no dated activity last, by id.
    return sorted(rows.values(), key=lambda r: (r.last is None, -(r.last.timestamp() if r.last else 0), r.user_id))


@require_GET
@login_required
def users_list(request: HtmxHttpRequest) -> HttpResponse:
    """Everyone memory holds something about, with what is held and when they were last seen."""
    form = UsersFilter(request.GET)
    data = form.cleaned_data if form.is_valid() else {}
    rows = _user_rows(data.get("q") or "")
    ctx = {"form": form, "page": page_of(request, rows, data.get("page")), "query": query_without_page(data)}
    if request.htmx and request.htmx.target == "user-rows":
        return render(request, "dashboard/users.html#rows", ctx)
    return render(request, "dashboard/users.html", ctx)


def user_or_404(user_id: str) -> str:
    """The user id from the URL: a valid id (as the store would name its folder) of
    someone memory holds something about. Anything else is "not found", never an error
    page showing the id's path."""
    try:
        return person_id(user_id)
    except PersonError:
        raise Http404("no such user") from None


@dataclass
class FactGroup:
    agent_name: str
    project_id: str
    facts: list[FactCard]

    @property
    def active(self) -> int:
        return sum(1 for f in self.facts if f.status == CardStatus.ACTIVE)


def _fact_groups(user_id: str, projects: list[str]) -> tuple[list[FactGroup], bool]:
    """The person's own cards by agent, then the shared cards of each project their
    conversations belong to (project facts have no user: they are the team's)."""
    own = Q(user_id=user_id)
    shared = Q(user_id="", project_id__in=projects)
    cards = list(
        FactCard.objects.filter(own | shared if projects else own)
        .order_by("-user_id", "agent_name", "project_id", "status", "key")
        .only("id", "key", "content", "status", "category", "user_id", "agent_name", "project_id", "updated_at")[
            : SHOWN_FACTS + 1
        ]
    )
    more = len(cards) > SHOWN_FACTS
    groups = [
        FactGroup(agent, project, list(items))
        for (agent, project), items in groupby(
            cards[:SHOWN_FACTS], key=lambda c: (c.agent_name if c.user_id else "", c.project_id)
        )
    ]
    return groups, more


def _threads(user_id: str) -> list[dict[str, Any]]:
    threads = cast(
        list[dict[str, Any]],
        list(
            Turn.objects.filter(user_id=user_id)
            .values("agent_name", "thread_id")
            .annotate(turns=Count("id"), last=Max("received_at"))
            .order_by("-last")[:200]
        ),
    )
    per_thread = {
        (r["agent_name"], r["source_thread_id"]): r["n"]
        for r in FactCard.objects.filter(user_id=user_id)
        .values("agent_name", "source_thread_id")
        .annotate(n=Count("id"))
        .order_by()
    }
    for thread in threads:
        thread["cards"] = per_thread.get((thread["agent_name"], thread["thread_id"]), 0)
    return threads


def run_url(pk: int, first_candidate: int | None) -> str:
    """The run's own page once the runs pages exist (`runs_detail`); until then the
    page of its first candidate (which shows the run's conversation), or the turns page."""
    try:
        return reverse("runs_detail", args=[pk])
    except NoReverseMatch:
        if first_candidate is not None:
            return reverse("candidate_detail", args=[first_candidate])
        return reverse("turn_problems")


def _runs(user_id: str) -> list[dict[str, Any]]:
    runs = cast(
        list[dict[str, Any]],
        list(
            ExtractionRun.objects.filter(user_id=user_id)
            .order_by("-started_at", "-pk")
            .values("pk", "agent_name", "thread_id", "status", "started_at", "error")[:RECENT]
        ),
    )
    firsts = dict(
        Candidate.objects.filter(run_id__in=[r["pk"] for r in runs])
        .values("run_id")
        .annotate(first=Min("pk"))
        .values_list("run_id", "first")
    )
    for run in runs:
        run["url"] = run_url(run["pk"], firsts.get(run["pk"]))
    return runs


@require_GET
@login_required
def users_detail(request: HtmxHttpRequest, user_id: str) -> HttpResponse:
    """One person: everything held about them and what was done about it."""
    user_id = user_or_404(user_id)
    projects = sorted(
        set(Turn.objects.filter(user_id=user_id).exclude(project_id="").values_list("project_id", flat=True))
    )
    groups, more_facts = _fact_groups(user_id, projects)
    ctx = {
        "user_id": user_id,
        "groups": groups,
        "more_facts": more_facts,
        "sections": ProfileSection.objects.filter(user_id=user_id).exclude(summary="").order_by("group", "name"),
        "versions": ProfileRevision.objects.filter(user_id=user_id)
        .order_by("-revision")
        .only("revision", "actor", "reason", "created_at")[:RECENT],
        "threads": _threads(user_id),
        "runs": _runs(user_id),
        "candidates": Candidate.objects.filter(user_id=user_id)
        .order_by("-created_at", "-pk")
        .only("pk", "kind", "key", "section", "content", "verdict", "review_state", "agent_name", "created_at")[
            :RECENT
        ],
        "activity": AuditEvent.objects.filter(user_id=user_id).order_by("-created_at", "-pk")[:RECENT],
        "projects": projects,
        "running": running_for(user_id),
        # What the agents were shown lately (the injection log); each opens "what the agent saw".
        "served": Injection.objects.filter(user_id=user_id)
        .annotate(cards=Count("facts"))
        .order_by("-served_at", "-pk")[:RECENT],
        "injection_days": settings.MEMORY_INJECTION_LOG_DAYS,
    }
    return render(request, "dashboard/user.html", ctx)


# --- pickers ------------------------------------------------------------------------------


def _matching(field: str, q: str, models: tuple[Any, ...]) -> list[str]:
    """Distinct values of `field` starting with `q` first, then containing it."""
    found: set[str] = set()
    for model in models:
        rows = model.objects.exclude(**{field: ""})
        if q:
            rows = rows.filter(**{f"{field}__icontains": q})
        found.update(rows.values_list(field, flat=True).distinct().order_by()[: PICKER_OPTIONS * 4])
    lowered = q.lower()
    return sorted(found, key=lambda v: (not v.lower().startswith(lowered), v))[:PICKER_OPTIONS]


@require_GET
@login_required
def pick_users(request: HtmxHttpRequest) -> HttpResponse:
    """Options for a user field. Every dashboard role may see every person, so the
    scope is "signed in"; anonymous requests go to the login page like every page."""
    q = PickForm.of(request.GET, "user")
    options = _matching("user_id", q, (FactCard, Turn, ProfileSection, Candidate))
    return render(request, "dashboard/users.html#options", {"options": options})


@require_GET
@login_required
def pick_agents(request: HtmxHttpRequest) -> HttpResponse:
    q = PickForm.of(request.GET, "agent")
    options = _matching("agent_name", q, (FactCard, Turn, Candidate))
    return render(request, "dashboard/users.html#options", {"options": options})
