"""Claimed work has a lease: a dead worker's turns are taken over, a stale one writes nothing.

The process-level case (a real worker SIGKILLed mid-run) is `test_worker_kill.py`.
"""

from __future__ import annotations

import time
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from facts import tasks
from facts.intake import claims
from facts.intake.queue import record_turn
from facts.intake.turns import ThreadKey
from facts.judging import pipeline
from facts.models import ExtractedMessage, ExtractionRun, FactCard, Turn
from facts.tasks import process_thread
from tests.factories import fact_candidate
from tests.openai_stub import OpenAIStub

pytestmark = pytest.mark.django_db

THREAD: ThreadKey = {"user_id": "alice", "agent_name": "coder", "thread_id": "t1"}
MESSAGES = [
    {"role": "user", "content": "我主要做 Python 后端开发，平时请用中文解释技术问题。", "id": "u1"},
    {"role": "assistant", "content": "好的，明白。", "id": "a1"},
]


def _abandoned_turn(*, seconds_ago: float = 5, attempts: int = 1, **thread: str) -> Turn:
    """What a worker killed mid-extraction leaves behind: a claimed turn and a running
    run, both past their lease."""
    where: dict[str, Any] = {**THREAD, **thread}
    receipt = record_turn(**where, messages=MESSAGES)
    lapsed = timezone.now() - timedelta(seconds=seconds_ago)
    Turn.objects.filter(pk__in=receipt.turn_ids).update(
        status=Turn.Status.PROCESSING, claimed_by="dead-worker", lease_until=lapsed, attempts=attempts
    )
    ExtractionRun.objects.create(**where, claimed_by="dead-worker", lease_until=lapsed)
    return Turn.objects.get(pk=receipt.turn_ids[0])


def test_a_worker_claims_its_turns_with_a_lease(openai_stub: OpenAIStub, monkeypatch: Any) -> None:
    seen: list[tuple[str, Any, str, Any]] = []
    real_extract = pipeline.extract

    def watching(*args: Any, **kwargs: Any) -> Any:
        turn, run = Turn.objects.get(), ExtractionRun.objects.get()
        seen.append((turn.claimed_by, turn.lease_until, run.claimed_by, run.lease_until))
        return real_extract(*args, **kwargs)

    monkeypatch.setattr(pipeline, "extract", watching)
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    record_turn(**THREAD, messages=MESSAGES, flush=True)
    [(turn_claim, turn_lease, run_claim, run_lease)] = seen
    assert turn_claim and turn_claim == run_claim
    assert timezone.now() < turn_lease <= timezone.now() + timedelta(seconds=120)
    assert run_lease >= turn_lease
    done = Turn.objects.get()
    assert done.status == "done" and done.lease_until is None


def test_renewing_a_claim_extends_its_lease_and_tells_whether_it_is_still_held(settings: Any) -> None:
    turn = _abandoned_turn()
    assert claims.renew("dead-worker") == 1
    turn.refresh_from_db()
    assert turn.lease_until > timezone.now() + timedelta(seconds=110)
    assert claims.stuck_turns().count() == 0 and claims.stuck_runs().count() == 0
    assert claims.renew("someone-else") == 0


def test_a_lapsed_claim_is_taken_over_and_the_turn_extracted(openai_stub: OpenAIStub) -> None:
    turn = _abandoned_turn()
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    # The sweep hands the turn back and queues its thread (the test backend runs it now).
    assert tasks.reclaim_expired() == 1
    turn.refresh_from_db()
    assert turn.status == "done" and turn.claimed_by != "dead-worker"
    runs = dict(ExtractionRun.objects.values_list("claimed_by", "status"))
    assert runs["dead-worker"] == "failed" and runs[turn.claimed_by] == "succeeded"
    assert "stopped renewing its claim" in ExtractionRun.objects.get(claimed_by="dead-worker").error
    assert FactCard.objects.count() == 1 and ExtractedMessage.objects.filter(message_id="u1").count() == 1


def test_a_claim_within_its_lease_is_left_alone(openai_stub: OpenAIStub) -> None:
    turn = _abandoned_turn()
    Turn.objects.update(lease_until=timezone.now() + timedelta(seconds=60))
    ExtractionRun.objects.update(lease_until=timezone.now() + timedelta(seconds=60))
    assert tasks.reclaim_expired() == 0
    assert tasks.retry_failed() == 0
    turn.refresh_from_db()
    assert turn.status == "processing" and turn.claimed_by == "dead-worker"
    assert ExtractionRun.objects.get().status == "running"
    assert openai_stub.requests == []


def test_the_next_turn_of_the_thread_takes_a_lapsed_claim_over_too(openai_stub: OpenAIStub) -> None:
    _abandoned_turn()
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    record_turn(**THREAD, messages=[{"role": "user", "content": "我也常用 Go。", "id": "u2"}], flush=True)
    assert set(Turn.objects.values_list("status", flat=True)) == {"done"}
    conversation = openai_stub.requests[0]["messages"][1]["content"]
    assert "Python 后端" in conversation and "Go" in conversation  # merged into one extraction


def test_a_stale_worker_waking_after_the_takeover_writes_nothing(openai_stub: OpenAIStub, monkeypatch: Any) -> None:
    """Worker A's model call outlasts its lease; worker B takes the turn over and
    extracts it; then A's answer arrives. A must not write a second card."""
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    real_extract = pipeline.extract
    outcomes: list[tasks.ThreadOutcome] = []
    calls: list[int] = []

    def stalls_past_its_lease(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # worker A's call: while it hangs, its lease lapses
            Turn.objects.update(lease_until=timezone.now() - timedelta(seconds=1))
            ExtractionRun.objects.update(lease_until=timezone.now() - timedelta(seconds=1))
            outcomes.append(process_thread(**THREAD))  # worker B
        return real_extract(*args, **kwargs)

    monkeypatch.setattr(pipeline, "extract", stalls_past_its_lease)
    record_turn(**THREAD, messages=MESSAGES)
    outcome_a = process_thread(**THREAD, force=True)  # worker A
    [outcome_b] = outcomes
    assert outcome_b.status == "done" and outcome_a.status == "lost"
    assert len(openai_stub.requests) == 2  # both asked the model …
    assert FactCard.objects.count() == 1  # … one card was written
    assert ExtractedMessage.objects.filter(message_id="u1").count() == 1
    turn = Turn.objects.get()
    assert turn.status == "done" and turn.run_id == outcome_b.result.run_id
    lost = ExtractionRun.objects.get(pk=outcome_a.result.run_id)  # type: ignore[misc]
    assert lost.status == "failed" and "lease lost" in lost.error
    assert lost.candidates.count() == 0


def test_a_stale_worker_whose_model_call_fails_leaves_the_new_owners_turns_alone(
    openai_stub: OpenAIStub, monkeypatch: Any
) -> None:
    openai_stub.reply_error(500)
    record_turn(**THREAD, messages=MESSAGES)
    Turn.objects.update(status="processing", claimed_by="new-owner", lease_until=timezone.now() + timedelta(60))
    outcome = tasks._failed([Turn.objects.get().pk], "old-owner", "HTTP 500", timezone.now())
    assert outcome.status == "lost"
    turn = Turn.objects.get()
    assert turn.status == "processing" and turn.claimed_by == "new-owner" and turn.error == ""


def test_a_turn_whose_workers_keep_dying_ends_failed(settings: Any) -> None:
    settings.MEMORY_EXTRACTION_MAX_ATTEMPTS = 3
    turn = _abandoned_turn(attempts=3)
    assert tasks.reclaim_expired() == 1
    turn.refresh_from_db()
    assert turn.status == "failed" and "stopped renewing its claim" in turn.error


def test_retry_failed_covers_failed_turns_and_turns_stuck_for_less_than_30_minutes(openai_stub: OpenAIStub) -> None:
    stuck = _abandoned_turn(seconds_ago=5)
    failed = _abandoned_turn(thread_id="t2")
    Turn.objects.filter(pk=failed.pk).update(status=Turn.Status.FAILED, error="HTTP 500", claimed_by="", attempts=5)
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    out = StringIO()
    call_command("process_turns", "--retry-failed", stdout=out)
    assert "2 turn(s) back to pending" in out.getvalue()
    assert set(Turn.objects.values_list("status", flat=True)) == {"done"}
    assert stuck.pk != failed.pk


def test_retry_failed_can_be_limited_to_some_turns(openai_stub: OpenAIStub) -> None:
    first = _abandoned_turn()
    second = _abandoned_turn(thread_id="t2")
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    assert tasks.retry_failed(ids=[second.pk]) == 1
    assert dict(Turn.objects.values_list("pk", "status")) == {first.pk: "processing", second.pk: "done"}


def _doctor() -> tuple[int, str]:
    err = StringIO()
    try:
        call_command("doctor", "--skip", "model", "--skip", "index", "--skip", "files", stdout=StringIO(), stderr=err)
    except CommandError as exc:
        return exc.returncode, err.getvalue()
    return 0, err.getvalue()


def test_doctor_fails_on_turns_and_runs_stuck_past_their_lease() -> None:
    _abandoned_turn()
    code, err = _doctor()
    assert code == 1
    assert "FAIL turns: 1 turns stuck in processing past their lease" in err
    assert "FAIL turns: 1 extraction runs stuck in running past their lease" in err


def test_doctor_says_nothing_of_a_turn_within_its_lease() -> None:
    _abandoned_turn()
    Turn.objects.update(lease_until=timezone.now() + timedelta(seconds=60))
    ExtractionRun.objects.update(lease_until=timezone.now() + timedelta(seconds=60))
    _code, err = _doctor()
    assert "stuck" not in err


def test_doctor_refuses_a_lease_that_is_not_positive(settings: Any) -> None:
    settings.MEMORY_CLAIM_LEASE_SECONDS = 0
    err = StringIO()
    with pytest.raises(CommandError):
        call_command("doctor", "--skip", "model", "--skip", "index", "--skip", "files", stdout=StringIO(), stderr=err)
    assert "MEMORY_CLAIM_LEASE_SECONDS must be positive" in err.getvalue()


def test_the_lease_and_the_sweep_follow_the_setting(settings: Any) -> None:
    settings.MEMORY_CLAIM_LEASE_SECONDS = 8
    assert claims.sweep_interval() == 2
    assert abs((claims.lease_until() - timezone.now()).total_seconds() - 8) < 1
    settings.MEMORY_CLAIM_LEASE_SECONDS = 1
    assert claims.sweep_interval() == 0.5


def test_the_heartbeat_renews_the_claim_while_a_long_model_call_runs(
    openai_stub: OpenAIStub, settings: Any, monkeypatch: Any
) -> None:
    # The renewal itself is `renew` (tested above, on the database); here only that the
    # heartbeat calls it every third of a lease while the work runs, and stops after.
    settings.MEMORY_CLAIM_LEASE_SECONDS = 0.6
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    renewed: list[str] = []
    monkeypatch.setattr(claims, "renew", lambda token: renewed.append(token) or 1)
    real_extract = pipeline.extract

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(1.5)  # two and a half leases
        return real_extract(*args, **kwargs)

    monkeypatch.setattr(pipeline, "extract", slow)
    record_turn(**THREAD, messages=MESSAGES, flush=True)
    turn = Turn.objects.get()
    assert turn.status == "done"
    assert len(renewed) >= 4 and set(renewed) == {turn.claimed_by}  # every 0.2 s, and once before writing
    count = len(renewed)
    time.sleep(0.5)
    assert len(renewed) == count  # it stopped with the work


def test_a_starting_worker_hands_lapsed_claims_back_and_queues_them(settings: Any, monkeypatch: Any) -> None:
    from django_tasks_db.management.commands import db_worker
    from django_tasks_db.models import DBTaskResult

    settings.TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    monkeypatch.setattr(db_worker.Worker, "run", lambda self: None)  # the queue loop is django-tasks-db's
    # Its SIGTERM/SIGINT handlers would stay in this process (run() resets them) and be
    # inherited by later tests' forked children, which then ignore Pool.terminate().
    monkeypatch.setattr(db_worker.Worker, "configure_signals", lambda self: None)
    turn = _abandoned_turn()
    call_command("db_worker", "--batch", "--no-startup-delay", "--no-reload", "-v", "0", stdout=StringIO())
    turn.refresh_from_db()
    assert turn.status == "pending" and turn.flush
    # queued to run now (the turn's own job waits for its debounce window)
    jobs = DBTaskResult.objects.ready().filter(task_path__endswith="process_thread_task")
    assert [job.args_kwargs["args"] for job in jobs] == [["alice", "coder", "t1"]]


def test_the_dead_workers_job_row_is_closed_with_its_claim(settings: Any) -> None:
    from django_tasks_db.models import DBTaskResult

    from facts.tasks import process_thread_task

    settings.TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    job = process_thread_task.enqueue("alice", "coder", "t1")
    DBTaskResult.objects.filter(pk=job.id).update(status="RUNNING")  # its worker was killed mid-run
    turn = _abandoned_turn()
    Turn.objects.filter(pk=turn.pk).update(claimed_by=str(job.id).replace("-", ""))
    assert tasks.reclaim_expired() == 1
    row = DBTaskResult.objects.get(pk=job.id)
    assert row.status == "FAILED" and "ClaimLapsed" in row.exception_class_path
    assert "stopped renewing its claim" in row.traceback
