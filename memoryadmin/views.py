"""Dashboard pages of the project package: overview, index console, audit log, agents
and API keys. They compose both sides, so they live here."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.cache import cache
from django.db.models import CharField, Count
from django.db.models.functions import Cast, Substr
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from facts.access import ADMINISTER
from facts.extraction import describe_extractor
from facts.forms import AuditFilters, day_end, day_start
from facts.models import AuditEvent, Candidate, ExtractionRun, FactCard
from facts.views import audit, overview_counts, page_of, query_without_page
from retrieval.forms import AgentSettingsForm, settings_of
from retrieval.models import AgentSettings, IndexRebuild
from retrieval.views import store_agent_settings

from . import tasks
from .dashboard_forms import ApiKeyForm, ReasonOnly
from .models import ApiKey, DriftCheck

CHART_DAYS = 14
CHART_CACHE_SECONDS = 60
REASON_SAMPLE = 5000

# --- overview ---------------------------------------------------------------------------


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str
    value: int
    kind: str


def verdict_chart(days: int = CHART_DAYS) -> dict[str, Any]:
    """Accepted and rejected candidates per day, as bars laid out for an inline SVG."""
    today = timezone.now().date()
    since = today - timedelta(days=days - 1)
    # The day as the first ten characters of the stored timestamp (UTC): TruncDate would
    # call a Python function per row on SQLite, many times slower over 100k candidates.
    rows = (
        Candidate.objects.filter(created_at__gte=day_start(since))
        .annotate(day=Substr(Cast("created_at", CharField()), 1, 10))
        .values("day", "verdict")
        .annotate(n=Count("id"))
        .order_by()
    )
    per_day: dict[Any, dict[str, int]] = {
        since + timedelta(days=i): {"accepted": 0, "rejected": 0} for i in range(days)
    }
    by_text = {day.isoformat(): counts for day, counts in per_day.items()}
    for row in rows:
        if row["day"] in by_text and row["verdict"] in by_text[row["day"]]:
            by_text[row["day"]][row["verdict"]] = row["n"]
    peak = max([max(v.values()) for v in per_day.values()] + [1])
    height, slot = 120.0, 36.0
    bars: list[Bar] = []
    for i, (day, counts) in enumerate(per_day.items()):
        for j, kind in enumerate(("accepted", "rejected")):
            h = height * counts[kind] / peak
            bars.append(Bar(i * slot + 4 + j * 14, height - h + 10, 13, h, day.strftime("%m-%d"), counts[kind], kind))
    labels = [(i * slot + 4, day.strftime("%d")) for i, day in enumerate(per_day)]
    totals = {k: sum(v[k] for v in per_day.values()) for k in ("accepted", "rejected")}
    return {
        "bars": bars,
        "labels": labels,
        "width": days * slot + 8,
        "height": height + 30,
        "peak": peak,
        "totals": totals,
        "days": days,
    }


def reason_chart() -> dict[str, Any]:
    """Rejections by reason code over the most recent rejected candidates."""
    recent = (
        Candidate.objects.filter(verdict=Candidate.Verdict.REJECTED)
        .order_by("-created_at")
        .values_list("reasons", flat=True)[:REASON_SAMPLE]
    )
    counts: Counter[str] = Counter()
    for reasons in recent:
        counts.update(r for r in (reasons or []) if isinstance(r, str))
    items = counts.most_common(12)
    peak = max([n for _, n in items] + [1])
    rows = [{"code": code, "n": n, "y": i * 24 + 4, "width": 260.0 * n / peak} for i, (code, n) in enumerate(items)]
    return {"rows": rows, "height": len(rows) * 24 + 8, "sample": REASON_SAMPLE}


def index_health() -> dict[str, Any]:
    return {
        "check": DriftCheck.objects.order_by("-created_at").first(),
        "rebuild": IndexRebuild.objects.order_by("-created_at").first(),
    }


def charts() -> dict[str, Any]:
    """Both charts, cached for a minute: they show days and proportions, and under steady
    ingestion they would otherwise be recomputed on every visit."""
    key = f"dashboard:charts:{timezone.now():%Y-%m-%d}"
    cached = cache.get(key)
    if cached is None:
        cached = {"verdicts": verdict_chart(), "reasons": reason_chart()}
        cache.set(key, cached, CHART_CACHE_SECONDS)
    return cached


@require_GET
@login_required
def overview(request: HttpRequest) -> HttpResponse:
    ctx = {
        "counts": overview_counts(),
        **charts(),
        "runs": ExtractionRun.objects.order_by("-started_at").defer("filtered_rows", "raw_output")[:10],
        "health": index_health(),
        "extractor": describe_extractor(),
    }
    return render(request, "memoryadmin/overview.html", ctx)


# --- index console ----------------------------------------------------------------------


@require_GET
@login_required
def index_console(request: HttpRequest) -> HttpResponse:
    ctx = {
        **index_health(),
        "rebuilds": IndexRebuild.objects.order_by("-created_at")[:10],
        "checks": DriftCheck.objects.order_by("-created_at").defer("report")[:10],
    }
    return render(request, "memoryadmin/index.html", ctx)


@login_required
@permission_required("facts.curate_memory", raise_exception=True)
@require_POST
def index_check(request: HttpRequest) -> HttpResponse:
    check = DriftCheck.objects.create(requested_by=request.user.get_username())
    try:
        tasks.check_drift.enqueue(check.pk)
    except Exception as exc:  # the immediate backend runs it here and re-raises nothing useful to the user
        messages.error(request, f"The check failed: {exc}")
    return redirect("index_console")


@login_required
@permission_required("facts.curate_memory", raise_exception=True)
@require_POST
def index_rebuild(request: HttpRequest) -> HttpResponse:
    running = IndexRebuild.objects.filter(status__in=[IndexRebuild.Status.QUEUED, IndexRebuild.Status.RUNNING]).first()
    if running is not None:
        messages.info(request, "A rebuild is already under way.")
        return redirect("rebuild_progress", pk=running.pk)
    form = ReasonOnly(request.POST)
    form.is_valid()
    row = IndexRebuild.objects.create(requested_by=request.user.get_username())
    audit(request, AuditEvent.Action.REBUILD, target=f"rebuild:{row.pk}", reason=form.cleaned_data.get("reason", ""))
    tasks.rebuild_index.enqueue(row.pk)
    return redirect("rebuild_progress", pk=row.pk)


@require_GET
@login_required
def rebuild_progress(request: HttpRequest, pk: int) -> HttpResponse:
    row = IndexRebuild.objects.filter(pk=pk).first()
    if row is None:
        raise Http404("no such rebuild")
    finished = row.status in (IndexRebuild.Status.SUCCEEDED, IndexRebuild.Status.FAILED)
    percent = (
        100
        if finished and row.status == IndexRebuild.Status.SUCCEEDED
        else (100 * row.done // row.total if row.total else 0)
    )
    ctx = {"row": row, "finished": finished, "percent": percent}
    if request.htmx:
        return render(request, "memoryadmin/rebuild.html#progress", ctx)
    return render(request, "memoryadmin/rebuild.html", ctx)


# --- audit log --------------------------------------------------------------------------


@require_GET
@login_required
def audit_log(request: HttpRequest) -> HttpResponse:
    form = AuditFilters(request.GET)
    rows = AuditEvent.objects.none()
    query = ""
    number = None
    if form.is_valid():
        data = form.cleaned_data
        rows = AuditEvent.objects.all()
        for name, field in (
            ("action", "action"),
            ("actor", "actor"),
            ("user", "user_id"),
            ("agent", "agent_name"),
            ("target", "target"),
        ):
            if data.get(name):
                rows = rows.filter(**{field: data[name]})
        if data.get("since"):
            rows = rows.filter(created_at__gte=day_start(data["since"]))
        if data.get("until"):
            rows = rows.filter(created_at__lte=day_end(data["until"]))
        rows = rows.order_by("-created_at", "-id")
        query = query_without_page(data)
        number = data.get("page")
    ctx = {"form": form, "page": page_of(request, rows, number), "query": query}
    if request.htmx and request.htmx.target == "audit-rows":
        return render(request, "memoryadmin/audit.html#rows", ctx)
    return render(request, "memoryadmin/audit.html", ctx)


# --- agents and API keys ---------------------------------------------------------------


def known_agents() -> list[str]:
    names = set(AgentSettings.objects.values_list("agent_name", flat=True))
    names |= set(FactCard.objects.exclude(agent_name="").values_list("agent_name", flat=True).distinct()[:500])
    return sorted(names)


@require_GET
@login_required
def agents(request: HttpRequest) -> HttpResponse:
    rows = []
    for name in known_agents():
        current = settings_of(name)
        rows.append(
            {"name": name, **current, "form": AgentSettingsForm(initial={"agent": name, **current}, prefix=name)}
        )
    ctx = {
        "agents": rows,
        "keys": ApiKey.objects.order_by("-created_at")[:200],
        "key_form": ApiKeyForm(),
        "new_agent": AgentSettingsForm(prefix="new"),
    }
    return render(request, "memoryadmin/agents.html", ctx)


@login_required
@permission_required(ADMINISTER, raise_exception=True)
@require_POST
def agent_settings(request: HttpRequest) -> HttpResponse:
    prefix = request.POST.get("prefix", "")
    form = AgentSettingsForm(request.POST, prefix=prefix or None)
    if not form.is_valid():
        messages.error(request, "Not saved: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
        return redirect("agents")
    row = store_agent_settings(request, form.cleaned_data)
    messages.success(request, f"Budgets of {row.agent_name} saved.")
    return redirect("agents")


@login_required
@permission_required(ADMINISTER, raise_exception=True)
@require_POST
def api_key_create(request: HttpRequest) -> HttpResponse:
    form = ApiKeyForm(request.POST)
    if not form.is_valid():
        messages.error(request, "No key created: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
        return redirect("agents")
    key, raw = ApiKey.issue(
        form.cleaned_data["name"],
        allowed_agents=form.cleaned_data["allowed_agents"],
        allowed_users=form.cleaned_data["allowed_users"],
        created_by=request.user.get_username(),
    )
    audit(
        request,
        AuditEvent.Action.API_KEY,
        target=f"key:{key.pk}",
        reason="created",
        name=key.name,
        prefix=key.prefix,
        allowed_agents=key.allowed_agents,
        allowed_users=key.allowed_users,
    )
    # Shown once, in this response only: the database keeps the hash.
    response = render(request, "memoryadmin/key_created.html", {"key": key, "raw": raw})
    response["Cache-Control"] = "no-store"
    return response


@login_required
@permission_required(ADMINISTER, raise_exception=True)
@require_POST
def api_key_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    key = ApiKey.objects.filter(pk=pk).first()
    if key is None:
        raise Http404("no such key")
    if key.active:
        key.revoke()
        audit(
            request,
            AuditEvent.Action.API_KEY,
            target=f"key:{key.pk}",
            reason="revoked",
            name=key.name,
            prefix=key.prefix,
        )
        messages.success(request, f"Key {key.name} revoked.")
    return redirect("agents")
