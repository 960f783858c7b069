"""Backtest: what the gate would have decided on recorded candidates under other settings.

Each recorded run is judged again by the live gate (`facts.judging.runs.judge`, the code that
judged it the first time), with its stored filtered conversation and model output,
against memory as it stood when the run was first judged (`Snapshot`: the card and
profile revisions older than that moment), and nothing is written. Runs judged in one
batch (a backfill's group commit) are replayed in one plan, in their order, so each sees
what the ones before it accepted, as it did. With the settings each run was recorded
under, every verdict comes out as recorded.

What is recorded, and what older runs lack: since migration 0006 a run stores the
moment it was judged (`judged_at`, taken under the buckets' locks) and the threshold
and review mode it was judged under. Older runs are replayed at their first
candidate's creation (just after planning) with today's threshold and the review mode
their candidates show; a card deleted since (its revisions gone with it) is missing
from their snapshot, so a duplicate of it can show as a flip.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import Min

from facts import audit
from facts.judging.plan import Plan, bucket_filter
from facts.judging.runs import REVIEW_AUTO, REVIEW_MANUAL, Context, judge, threshold_in_force
from facts.judging.schemas import Parsed, parse_update
from facts.models import AuditEvent, Candidate, ExtractionRun, FactCard, FactRevision, GateSettings, ProfileRevision
from facts.storage.cardfile import Card, parse_card
from facts.storage.errors import CardParseError
from facts.storage.profilefile import Profile
from facts.storage.store import Bucket, get_store

ACCEPTED, PENDING, REJECTED = "accepted", "pending", "rejected"
# Plans of the batches replayed last (a batch's runs are consecutive, or nearly).
MAX_BATCHES = 16


def outcome(verdict: str, review_state: str) -> str:
    """Accepted and written at once, accepted and held for a reviewer (manual mode), or
    rejected. A held candidate stays `pending` here after its review: the gate held it."""
    if verdict != Candidate.Verdict.ACCEPTED:
        return REJECTED
    return ACCEPTED if review_state == Candidate.ReviewState.NONE else PENDING


@dataclass
class _Version:
    fact_id: str
    revision: int
    created_at: datetime
    reason: str
    text: str


class History:
    """The card and profile revisions of the buckets a backtest touches, read once per
    bucket and user (a backtest replays many runs of the same few buckets)."""

    def __init__(self) -> None:
        self.buckets: dict[Bucket, list[_Version]] = {}
        self.profiles: dict[str, list[tuple[datetime, str, int, dict[str, Any]]]] = {}
        self.parsed: dict[tuple[str, int], Card | None] = {}

    def versions(self, bucket: Bucket) -> list[_Version]:
        versions = self.buckets.get(bucket)
        if versions is None:
            # Every card the bucket ever had that is still recorded (superseded and
            # expired ones too: they may have been active then).
            ids = FactCard.objects.filter(**bucket_filter(bucket)).values("id")
            rows = FactRevision.objects.filter(fact_id__in=ids).order_by("fact_id", "revision")
            versions = [
                _Version(*row) for row in rows.values_list("fact_id", "revision", "created_at", "reason", "text")
            ]
            self.buckets[bucket] = versions
        return versions

    def card(self, version: _Version) -> Card | None:
        key = (version.fact_id, version.revision)
        if key not in self.parsed:
            try:
                self.parsed[key] = parse_card(version.text, Path(version.fact_id))
            except CardParseError:
                self.parsed[key] = None
        return self.parsed[key]

    def profile_versions(self, user_id: str) -> list[tuple[datetime, str, int, dict[str, Any]]]:
        versions = self.profiles.get(user_id)
        if versions is None:
            rows = ProfileRevision.objects.filter(user_id=user_id).order_by("revision")
            versions = list(rows.values_list("created_at", "reason", "revision", "document"))
            self.profiles[user_id] = versions
        return versions


class Snapshot:
    """Memory as the card and profile revisions say it was just before `at`; the
    revisions written for `exclude_reason` (the replayed run's own) left out."""

    def __init__(self, at: datetime, *, exclude_reason: str = "", history: History | None = None) -> None:
        self.at = at
        self.exclude_reason = exclude_reason
        self.history = history or History()
        self.cards: dict[Bucket, dict[str, Card]] = {}

    def _seen(self, created_at: datetime, reason: str) -> bool:
        return created_at < self.at and not (self.exclude_reason and reason == self.exclude_reason)

    def _bucket(self, bucket: Bucket) -> dict[str, Card]:
        cards = self.cards.get(bucket)
        if cards is None:
            latest: dict[str, _Version] = {}
            for version in self.history.versions(bucket):  # ordered by id, revision
                if self._seen(version.created_at, version.reason):
                    latest[version.fact_id] = version
            cards = {}
            for fact_id, version in latest.items():
                card = self.history.card(version)
                if card is not None:
                    cards[fact_id] = card
            self.cards[bucket] = cards
        return cards

    def active(self, bucket: Bucket) -> Iterable[tuple[str, str, str]]:
        live = [c for c in self._bucket(bucket).values() if c.status == "active"]
        return [(c.id, c.key, c.content) for c in sorted(live, key=lambda c: (c.created_at, c.id))]

    def read_card(self, bucket: Bucket, fact_id: str) -> Card | None:
        return self._bucket(bucket).get(fact_id)

    def read_profile(self, user_id: str) -> Profile:
        # A run's profile sections are written before its candidates are recorded:
        # the exclusion keeps an older run's own write out of its snapshot.
        seen = [
            doc for created, reason, _rev, doc in self.history.profile_versions(user_id) if self._seen(created, reason)
        ]
        return Profile.model_validate(seen[-1]) if seen else Profile(user_id=user_id)


@dataclass
class Flip:
    candidate_id: int
    run_id: int
    kind: str
    key: str
    content: str
    before: str
    after: str
    reasons_before: list[str]
    reasons_after: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {
            "candidate_id": self.candidate_id,
            "run_id": self.run_id,
            "kind": self.kind,
            "key": self.key,
            "content": self.content,
            "from": self.before,
            "to": self.after,
            "reasons_before": self.reasons_before,
            "reasons_after": self.reasons_after,
        }


@dataclass
class Report:
    candidates: int = 0
    runs: int = 0
    flips: list[Flip] = field(default_factory=list)
    # Per reason code: how many candidates would gain it, and lose it.
    by_reason: dict[str, dict[str, int]] = field(
        default_factory=lambda: defaultdict(lambda: {"added": 0, "removed": 0})
    )
    unreplayable: list[int] = field(default_factory=list)  # run ids
    inexact: int = 0  # runs recorded before judged_at existed
    reason_changes: int = 0  # same outcome, other reasons

    def as_dict(self) -> dict[str, Any]:
        moves = Counter(f"{f.before}->{f.after}" for f in self.flips)
        return {
            "candidates": self.candidates,
            "runs": self.runs,
            "flips": [f.as_dict() for f in self.flips],
            "by_reason": {code: dict(v) for code, v in sorted(self.by_reason.items())},
            "by_change": dict(sorted(moves.items())),
            "reason_changes": self.reason_changes,
            "unreplayable_runs": self.unreplayable,
            "runs_without_recorded_settings": self.inexact,
        }


def recorded_runs(
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    user: str = "",
    agent: str = "",
    max_runs: int | None = None,
) -> Iterator[ExtractionRun]:
    """Succeeded runs with candidates, oldest first; with `max_runs`, the latest ones."""
    runs = ExtractionRun.objects.filter(status=ExtractionRun.Status.SUCCEEDED, candidates__isnull=False).distinct()
    if since is not None:
        runs = runs.filter(started_at__gte=since)
    if until is not None:
        runs = runs.filter(started_at__lte=until)
    if user:
        runs = runs.filter(user_id=user)
    if agent:
        runs = runs.filter(agent_name=agent)
    if max_runs is not None:
        latest = list(runs.order_by("-started_at", "-pk").values_list("pk", flat=True)[:max_runs])
        runs = ExtractionRun.objects.filter(pk__in=latest)
    yield from runs.order_by("started_at", "pk").iterator(chunk_size=200)


def _parsed(run: ExtractionRun, recorded: list[Candidate]) -> list[Parsed] | None:
    """What the model sent, as the gate first parsed it; None when it is not recorded."""
    raw = run.raw_output
    if raw is None:
        if any(row.raw is None for row in recorded):
            return None
        # A run applied without its output stored: its candidates carry what the model sent.
        raw = {"facts": [], "summaries": [], "confirmations": []}
        lists = {"fact": "facts", "summary": "summaries", "confirmation": "confirmations"}
        for row in recorded:
            raw[lists[row.kind]].append(row.raw)
    try:
        return parse_update(raw)
    except TypeError:
        return [Parsed("fact", 0, raw, None, "model output is not a JSON object")]


def _recorded_mode(run: ExtractionRun, recorded: list[Candidate]) -> str:
    if run.review_mode:
        return run.review_mode
    accepted = [r for r in recorded if r.verdict == Candidate.Verdict.ACCEPTED]
    if accepted:
        return REVIEW_AUTO if accepted[0].review_state == Candidate.ReviewState.NONE else REVIEW_MANUAL
    return settings.MEMORY_REVIEW_MODE


def backtest(
    *,
    threshold: float | None = None,
    review_mode: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    user: str = "",
    agent: str = "",
    max_runs: int | None = None,
) -> Report:
    """Replay the recorded runs (the latest `max_runs` of them); `threshold` /
    `review_mode` None: as each run was judged."""
    report = Report()
    history = History()
    # Runs judged in one batch (`runs.apply_runs`: a backfill's group commit) share their
    # `judged_at`, and each saw what the ones before it accepted: a candidate repeating
    # an earlier run's fact was a duplicate of a card no revision older than `judged_at`
    # holds. They are replayed through one plan, in order, as they were judged.
    batches: OrderedDict[datetime, Plan] = OrderedDict()
    for run in recorded_runs(since=since, until=until, user=user, agent=agent, max_runs=max_runs):
        recorded = list(run.candidates.order_by("pk"))
        at = run.judged_at
        if at is None:
            report.inexact += 1
            at = Candidate.objects.filter(run=run).aggregate(first=Min("created_at"))["first"]
        ctx = Context(
            user_id=run.user_id,
            agent_name=run.agent_name,
            thread_id=run.thread_id,
            project_id=run.project_id or None,
            rows=run.filtered_rows,
            mode=review_mode or _recorded_mode(run, recorded),
            threshold=threshold if threshold is not None else _recorded_threshold(run),
            max_candidates=settings.MEMORY_MAX_CANDIDATES_PER_RUN,
        )
        parsed = _parsed(run, recorded)
        if parsed is None:
            report.unreplayable.append(run.pk)
            continue
        memory = Snapshot(at, exclude_reason=f"run {run.pk}", history=history)
        plan = None
        if run.judged_at is not None:
            plan = batches.get(run.judged_at)
            if plan is None:
                plan = batches[run.judged_at] = Plan(get_store(), memory)
                if len(batches) > MAX_BATCHES:
                    batches.popitem(last=False)
        replayed = judge(run, parsed, ctx, memory, plan=plan)
        if len(replayed) != len(recorded) or any(
            (a.kind, a.position) != (b.kind, b.position) for a, b in zip(recorded, replayed, strict=False)
        ):
            report.unreplayable.append(run.pk)
            continue
        report.runs += 1
        report.candidates += len(recorded)
        for before, after in zip(recorded, replayed, strict=True):
            _compare(report, before, after)
    return report


def _recorded_threshold(run: ExtractionRun) -> float:
    return run.threshold if run.threshold is not None else threshold_in_force()


def _compare(report: Report, before: Candidate, after: Candidate) -> None:
    was, now = outcome(before.verdict, before.review_state), outcome(after.verdict, after.review_state)
    old, new = list(before.reasons or []), list(after.reasons or [])
    for code in set(new) - set(old):
        report.by_reason[code]["added"] += 1
    for code in set(old) - set(new):
        report.by_reason[code]["removed"] += 1
    if was == now:
        report.reason_changes += int(sorted(old) != sorted(new))
    else:
        report.flips.append(
            Flip(before.pk, before.run_id, before.kind, before.key, before.content[:200], was, now, old, new)
        )


def apply_threshold(value: float, *, actor: str, reason: str) -> float:
    """Make `value` the gate's threshold for every run judged from now on (audited);
    returns the one it replaces."""
    if not 0 <= value <= 1:
        raise ValueError("the threshold must be between 0 and 1")
    before = threshold_in_force()
    GateSettings.objects.update_or_create(pk=1, defaults={"threshold": value, "updated_by": actor})
    audit.record(
        actor,
        AuditEvent.Action.SETTINGS,
        target="gate.threshold",
        reason=reason,
        threshold_before=before,
        threshold=value,
    )
    return before
