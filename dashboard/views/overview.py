"""The overview page and the figures it shows: memory counts (cached under a fingerprint
of everything they depend on), verdicts per day, rejections by reason, the index's
health, the latest extraction runs."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.db.models import CharField, Count, Max, QuerySet
from django.db.models.functions import Cast, Substr
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard.forms.common import day_start
from facts.enums import CardStatus
from facts.judging.extraction import ModelStatus, describe_extractor, model_status
from facts.models import AuditEvent, Candidate, ExtractionRun, FactCard, ProfileSection
from memoryadmin.models import DriftCheck
from retrieval.models import IndexRebuild

CHART_DAYS = 14
CHART_CACHE_SECONDS = 60
REASON_SAMPLE = 5000
# Bounds staleness after changes that leave no trace in the fingerprint (a CLI reindex).
COUNTS_CACHE_SECONDS = 60
# The model check asks the endpoint once per this many seconds, and never waits longer
# than MODEL_CHECK_TIMEOUT: a dead server must not make the overview slow.
MODEL_CHECK_SECONDS = 30
MODEL_CHECK_TIMEOUT = 1.0

# --- overview counts ------------------------------------------------------------------


def counts_version() -> str:
    """A cheap fingerprint of everything the counts depend on (each an indexed max).

    Writes bump `updated_at`, deletions and reviews leave an audit event, rebuilds a row;
    so counts cached under this key are never stale, whichever process changed memory.
    """
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


def model_health() -> ModelStatus:
    # Keyed by the settings it checks, so changing them is seen at once.
    key = "dashboard:model-status:" + "|".join(
        [settings.MEMORY_EXTRACTOR, settings.MEMORY_LLM_BASE_URL, settings.MEMORY_LLM_MODEL]
    )
    cached = cache.get(key)
    if cached is None:
        cached = model_status(MODEL_CHECK_TIMEOUT)
        cache.set(key, cached, MODEL_CHECK_SECONDS)
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
        "model": model_health(),
    }
    return render(request, "dashboard/overview.html", ctx)
