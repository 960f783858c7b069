"""Backtest: recorded candidates replayed through the live gate with other settings."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from facts.judging import runs
from facts.judging.backtest import backtest
from facts.judging.schemas import parse_update
from facts.models import AuditEvent, Candidate, ExtractionRun, FactCard, FactRevision, ProfileRevision
from facts.storage.store import Store
from tests.factories import fact_candidate
from tests.test_gate import ROWS

pytestmark = pytest.mark.django_db


def record(raw: dict[str, Any], *, mode: str = "auto", threshold: float = 0.7, user: str = "alice") -> list[Candidate]:
    """One run through the gate as the pipeline records it (its output stored)."""
    run = ExtractionRun.objects.create(
        user_id=user, agent_name="coder", thread_id="t1", filtered_rows=ROWS, raw_output=raw, status="succeeded"
    )
    ctx = runs.Context(
        user_id=user, agent_name="coder", thread_id="t1", project_id=None, rows=ROWS, mode=mode, threshold=threshold
    )
    return runs.apply_run(run, parse_update(raw), ctx)


def history(store: Store) -> list[Candidate]:
    """A small history: a preference saved, then repeated; a hedged guess rejected."""
    [saved] = record({"facts": [fact_candidate()]})
    [repeat] = record({"facts": [fact_candidate(key="lang_again")]})
    [guess] = record(
        {
            "facts": [
                fact_candidate(
                    key="db", content="仓库用 PostgreSQL", evidence_text="这个仓库用 PostgreSQL", confidence=0.65
                )
            ]
        }
    )
    assert (saved.verdict, repeat.reasons, guess.reasons) == ("accepted", ["duplicate"], ["low_confidence"])
    return [saved, repeat, guess]


def test_it_reproduces_every_recorded_verdict_with_unchanged_settings(store: Store) -> None:
    history(store)
    report = backtest().as_dict()
    assert report["candidates"] == 3
    assert report["flips"] == [] and report["reason_changes"] == 0


def test_it_shows_what_gets_in_when_the_threshold_is_lowered(store: Store) -> None:
    _, _, guess = history(store)
    report = backtest(threshold=0.6).as_dict()
    [flip] = report["flips"]
    assert (flip["candidate_id"], flip["from"], flip["to"]) == (guess.pk, "rejected", "accepted")
    assert flip["reasons_before"] == ["low_confidence"] and flip["reasons_after"] == []
    assert report["by_reason"]["low_confidence"] == {"added": 0, "removed": 1}


def test_it_shows_what_is_kept_out_when_the_threshold_is_raised(store: Store) -> None:
    saved, _repeat, _ = history(store)
    report = backtest(threshold=0.95).as_dict()
    # The repeat is judged against memory as it stood: the saved card was there.
    assert [(f["candidate_id"], f["from"], f["to"]) for f in report["flips"]] == [(saved.pk, "accepted", "rejected")]
    assert report["by_reason"]["low_confidence"]["added"] == 3 - 1  # the guess had it already


def test_it_holds_accepted_candidates_for_review_in_manual_mode(store: Store) -> None:
    saved, _, _ = history(store)
    report = backtest(review_mode="manual").as_dict()
    assert [(f["candidate_id"], f["from"], f["to"]) for f in report["flips"]] == [(saved.pk, "accepted", "pending")]


def test_it_judges_a_manual_mode_run_as_it_was_recorded(store: Store) -> None:
    [held] = record({"facts": [fact_candidate()]}, mode="manual")
    assert backtest().as_dict()["flips"] == []
    [flip] = backtest(review_mode="auto").as_dict()["flips"]
    assert (flip["candidate_id"], flip["from"], flip["to"]) == (held.pk, "pending", "accepted")


WORK = {
    "section": "workContext",
    "summary": "用户主要做 Python 后端开发。",
    "scope": "user",
    "authority": "descriptive",
    "evidence_message_id": "u1",
    "evidence_text": "我主要做 Python 后端开发",
}


def test_it_replays_runs_recorded_before_their_settings_were(store: Store) -> None:
    history(store)
    [summary] = record({"summaries": [WORK]})
    [again] = record({"summaries": [WORK]})
    assert (summary.verdict, again.reasons) == ("accepted", ["duplicate"])
    ExtractionRun.objects.update(judged_at=None, threshold=None, review_mode="")
    report = backtest().as_dict()
    # Each run is judged without its own card and profile writes, with those before it.
    assert report["flips"] == [] and report["reason_changes"] == 0
    assert report["runs_without_recorded_settings"] == 5


def test_a_backtest_writes_nothing(store: Store, memory_root: Path) -> None:
    history(store)
    models: list[Any] = [Candidate, ExtractionRun, FactCard, FactRevision, ProfileRevision, AuditEvent]

    def state() -> Any:
        files = sorted((p.relative_to(memory_root), p.read_bytes()) for p in memory_root.rglob("*") if p.is_file())
        rows = [list(m.objects.order_by("pk").values()) for m in models]
        return files, rows

    before = state()
    backtest(threshold=0.1, review_mode="manual")
    backtest(threshold=0.99)
    assert state() == before


def test_the_command_prints_the_flips_as_json(store: Store) -> None:
    _, _, guess = history(store)
    out = StringIO()
    call_command("backtest", "--threshold", "0.6", "--user", "alice", "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert report["candidates"] == 3 and [f["candidate_id"] for f in report["flips"]] == [guess.pk]
    out = StringIO()
    call_command("backtest", "--threshold", "0.6", "--user", "bob", "--json", stdout=out)
    assert json.loads(out.getvalue())["candidates"] == 0


def test_a_run_whose_model_output_was_not_kept_is_listed_not_guessed(store: Store, make_candidate: Any) -> None:
    history(store)
    orphan = make_candidate(raw=None)
    report = backtest(threshold=0.4).as_dict()
    assert report["unreplayable_runs"] == [orphan.run_id]
    assert orphan.pk not in [f["candidate_id"] for f in report["flips"]]


def test_it_can_stop_at_the_latest_runs(store: Store) -> None:
    _, _, guess = history(store)
    report = backtest(threshold=0.6, max_runs=1).as_dict()
    assert report["runs"] == 1 and [f["candidate_id"] for f in report["flips"]] == [guess.pk]


def test_a_duplicate_of_a_fact_saved_earlier_in_the_same_batch_stays_a_duplicate(store: Store) -> None:
    """A backfill judges several runs in one batch (`apply_runs`, `manage.py ingest`):
    the second saw the first's card, which no revision older than their shared
    `judged_at` holds (issue 34: the replay called it "would be accepted")."""
    batch = []
    for thread in ("t1", "t2"):
        run = ExtractionRun.objects.create(
            user_id="alice", agent_name="coder", thread_id=thread, filtered_rows=ROWS,
            raw_output={"facts": [fact_candidate()]}, status="succeeded",
        )  # fmt: skip
        ctx = runs.Context(
            user_id="alice", agent_name="coder", thread_id=thread, project_id=None, rows=ROWS, mode="auto",
            threshold=0.7,
        )  # fmt: skip
        batch.append((run, parse_update(run.raw_output), ctx))
    [saved], [repeat] = runs.apply_runs(batch)
    assert (saved.verdict, repeat.reasons) == ("accepted", ["duplicate"])
    for report in (backtest(), backtest(threshold=0.7)):
        assert report.as_dict()["flips"] == [] and report.candidates == 2
    out = StringIO()
    call_command("backtest", "--threshold", "0.7", stdout=out)
    assert "0 flips" in out.getvalue()
