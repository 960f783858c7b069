"""Durable, asynchronous ingestion: turns stored first, debounce, dedup, failures kept."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from facts.intake import queue
from facts.intake.queue import record_turn
from facts.intake.turns import ThreadKey, TurnRejected
from facts.judging import pipeline
from facts.judging.pipeline import run_turns_now
from facts.models import Candidate, ExtractedMessage, ExtractionRun, FactCard, Turn
from facts.tasks import process_thread
from tests.factories import fact_candidate
from tests.openai_stub import OpenAIStub

pytestmark = pytest.mark.django_db

THREAD: ThreadKey = {"user_id": "alice", "agent_name": "coder", "thread_id": "t1"}


def turn(
    user_text: str = "我主要做 Python 后端开发，平时请用中文解释技术问题。", uid: str = "u1", aid: str = "a1"
) -> list:
    return [
        {"role": "user", "content": user_text, "id": uid},
        {"role": "assistant", "content": "好的，明白。", "id": aid},
    ]


def later(seconds: float = 31) -> Any:
    return timezone.now() + timedelta(seconds=seconds)


def test_it_stores_the_turn_before_answering() -> None:
    receipt = record_turn(**THREAD, project_id=None, messages=turn())
    assert receipt.accepted == 2 and len(receipt.turn_ids) == 1
    stored = Turn.objects.get(pk=receipt.turn_ids[0])
    assert stored.status == "pending" and stored.message_ids == ["u1", "a1"]
    assert stored.process_after > timezone.now() + timedelta(seconds=25)


def test_it_waits_for_the_debounce_window(openai_stub: OpenAIStub) -> None:
    record_turn(**THREAD, messages=turn())
    assert process_thread(**THREAD).status == "waiting"
    assert openai_stub.requests == [] and ExtractionRun.objects.count() == 0


def test_two_turns_in_the_debounce_window_make_one_extraction(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    first = record_turn(**THREAD, messages=turn())
    second = record_turn(**THREAD, messages=turn("我也常用 Go 写小工具", "u2", "a2"))
    outcome = process_thread(**THREAD, now=later())
    assert outcome.status == "done"
    assert len(openai_stub.requests) == 1
    conversation = openai_stub.requests[0]["messages"][1]["content"]
    assert "Python 后端" in conversation and "Go 写小工具" in conversation
    [run] = ExtractionRun.objects.all()
    assert set(Turn.objects.values_list("status", flat=True)) == {"done"}
    assert set(Turn.objects.values_list("run_id", flat=True)) == {run.pk}
    assert first.turn_ids != second.turn_ids
    assert FactCard.objects.filter(status="active").count() == 1


def test_the_window_runs_from_the_latest_turn(openai_stub: OpenAIStub) -> None:
    record_turn(**THREAD, messages=turn())
    Turn.objects.update(received_at=timezone.now() - timedelta(seconds=40), process_after=timezone.now())
    record_turn(**THREAD, messages=turn("再补充一点", "u2", "a2"))
    assert process_thread(**THREAD, now=later(5)).status == "waiting"


def test_a_flush_processes_at_once(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    record_turn(**THREAD, messages=turn(), flush=True)
    # The immediate task backend of the tests has already run the worker task.
    assert Turn.objects.get().status == "done"
    assert len(openai_stub.requests) == 1


def test_the_same_message_id_posted_twice_is_extracted_once(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    record_turn(**THREAD, messages=turn())
    again = record_turn(**THREAD, messages=turn())
    assert again.accepted == 0 and again.turn_ids == []
    process_thread(**THREAD, now=later())
    after = record_turn(**THREAD, messages=turn(), flush=True)
    assert after.accepted == 0
    assert len(openai_stub.requests) == 1
    assert ExtractedMessage.objects.filter(message_id="u1").count() == 1


def test_the_flush_and_the_normal_path_never_feed_a_message_twice(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_tool_call({"facts": []})
    record_turn(**THREAD, messages=turn(), flush=True)  # summarization flush sends it first
    receipt = record_turn(**THREAD, messages=[*turn(), *turn("新的消息", "u3", "a3")])
    assert receipt.accepted == 2
    assert Turn.objects.get(pk=receipt.turn_ids[0]).message_ids == ["u3", "a3"]


def test_messages_without_ids_get_stable_ones_so_a_repost_is_recognized(openai_stub: OpenAIStub) -> None:
    messages = [{"role": "user", "content": "我用 vim"}, {"role": "assistant", "content": "好"}]
    assert record_turn(**THREAD, messages=messages).accepted == 2
    assert record_turn(**THREAD, messages=messages).accepted == 0


def test_a_model_failure_leaves_the_turns_pending_with_the_error(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_error(500)
    record_turn(**THREAD, messages=turn())
    outcome = process_thread(**THREAD, now=later())
    assert outcome.status == "failed"
    stored = Turn.objects.get()
    assert stored.status == "pending" and "HTTP 500" in stored.error and stored.attempts == 1
    assert stored.process_after > later()  # backoff
    assert ExtractionRun.objects.get().status == "failed"
    assert ExtractedMessage.objects.count() == 0
    # The retry after the backoff succeeds and nothing was lost.
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    assert process_thread(**THREAD, now=later(3600)).status == "done"
    assert Turn.objects.get().status == "done"
    assert FactCard.objects.count() == 1


def test_after_the_last_attempt_the_turns_are_failed_and_can_be_retried(openai_stub: OpenAIStub, settings: Any) -> None:
    settings.MEMORY_EXTRACTION_MAX_ATTEMPTS = 1
    openai_stub.reply_error(500)
    record_turn(**THREAD, messages=turn())
    process_thread(**THREAD, now=later())
    assert Turn.objects.get().status == "failed"
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    call_command("process_turns", "--retry-failed", "--force", stdout=_Null())
    assert Turn.objects.get().status == "done"


def test_a_turn_without_user_words_is_skipped_without_a_model_call(openai_stub: OpenAIStub) -> None:
    record_turn(**THREAD, messages=[{"role": "user", "content": "好的", "id": "u1"}], flush=True)
    assert Turn.objects.get().status == "skipped"
    assert openai_stub.requests == []
    assert ExtractionRun.objects.get().status == "skipped"


def test_it_passes_the_project_of_the_turn_to_the_gate(openai_stub: OpenAIStub) -> None:
    rule = fact_candidate(
        key="db", content="仓库使用 PostgreSQL。", scope="project", category="context", evidence_text="PostgreSQL"
    )
    openai_stub.reply_tool_call({"facts": [rule]})
    record_turn(**THREAD, project_id="shop-api", messages=turn("这个仓库用 PostgreSQL"), flush=True)
    assert FactCard.objects.get().project_id == "shop-api"


def test_it_records_rejected_candidates_for_review(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_tool_call({"facts": [fact_candidate(scope="thread")]})
    record_turn(**THREAD, messages=turn(), flush=True)
    assert Candidate.objects.get().reasons == ["scope_thread"]


def test_process_turns_handles_every_due_thread(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_tool_call({"facts": []})
    record_turn(**THREAD, messages=turn())
    record_turn(user_id="bob", agent_name="coder", thread_id="t9", messages=turn("I write Rust", "b1", "b2"))
    Turn.objects.update(
        process_after=timezone.now() - timedelta(seconds=1), received_at=timezone.now() - timedelta(minutes=1)
    )
    call_command("process_turns", stdout=_Null())
    assert set(Turn.objects.values_list("status", flat=True)) == {"done"}


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"user_id": ""}, "user_id"),
        ({"user_id": None}, "user_id"),
        ({"user_id": "x" * 300}, "user_id"),
        ({"agent_name": "Bad Agent!"}, "agent_name"),
        ({"thread_id": ""}, "thread_id"),
        ({"project_id": 5}, "project_id"),
        ({"messages": "hello"}, "messages"),
        ({"messages": [{"content": "no role"}]}, "messages[0]"),
        ({"messages": [{"role": "user", "content": "x" * 200_000}]}, "messages[0].content"),
    ],
)
def test_it_rejects_bad_input_naming_the_field(overrides: dict[str, Any], field: str) -> None:
    data: dict[str, Any] = {**THREAD, "project_id": None, "messages": turn()} | overrides
    with pytest.raises(TurnRejected) as info:
        record_turn(**data)
    assert info.value.field == field
    assert Turn.objects.count() == 0


def test_it_rejects_too_many_messages(settings: Any) -> None:
    settings.API_MAX_MESSAGES = 3
    with pytest.raises(TurnRejected, match="holds more than 3 messages"):
        record_turn(**THREAD, messages=turn() + turn("x", "u2", "a2"))


def test_a_missing_agent_is_the_default_bucket() -> None:
    receipt = record_turn(user_id="alice", agent_name=None, thread_id="t1", messages=turn())
    assert Turn.objects.get(pk=receipt.turn_ids[0]).agent_name == "__default__"


def test_with_the_database_backend_the_task_waits_for_the_window(settings: Any) -> None:
    from django_tasks_db.models import DBTaskResult

    settings.TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    record_turn(**THREAD, messages=turn())
    task = DBTaskResult.objects.get()
    assert task.task_path == "facts.tasks.process_thread_task"
    assert task.run_after > timezone.now() + timedelta(seconds=25)
    assert task.args_kwargs["args"] == ["alice", "coder", "t1"]


def test_the_task_is_never_due_before_the_window_the_worker_checks(settings: Any, openai_stub: OpenAIStub) -> None:
    # `received_at` is set a little after the moment the turn was scheduled from; a task
    # due before `received_at + debounce` found the window open and nothing ran the
    # thread again (found reading the code for tests/test_concurrency_web.py).
    from django_tasks_db.models import DBTaskResult

    settings.TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    record_turn(**THREAD, messages=turn())
    record_turn(**THREAD, messages=turn("我也常用 Go 写小工具", "u2", "a2"))
    last = DBTaskResult.objects.order_by("run_after").last()
    assert last.run_after >= Turn.objects.latest("received_at").received_at + timedelta(seconds=30)
    assert process_thread(**THREAD, now=last.run_after).status == "done"


def test_run_turns_now_replays_model_output_without_calling_a_model(openai_stub: OpenAIStub) -> None:
    result = run_turns_now(**THREAD, messages=turn(), model_output={"facts": [fact_candidate()]})
    assert result.saved == 1 and result.roles == ["user", "assistant"]
    assert openai_stub.requests == []
    assert ExtractionRun.objects.get().replay is True
    assert Turn.objects.get().status == "done"


def test_the_pipeline_sends_profile_and_facts_as_reference_only(openai_stub: OpenAIStub) -> None:
    run_turns_now(**THREAD, messages=turn(), model_output={"facts": [fact_candidate()]})
    openai_stub.reply_tool_call({"facts": []})
    record_turn(**THREAD, messages=turn("我最近在学 Rust", "u5", "a5"), flush=True)
    payload = openai_stub.requests[0]["messages"][1]["content"]
    assert "response_language" in payload and "existing_facts" in payload


def test_the_queue_and_the_pipeline_expose_their_names() -> None:
    assert callable(queue.record_turn) and callable(pipeline.run_turns_now)


class _Null:
    def write(self, *_: Any) -> None:
        pass

    def flush(self) -> None:
        pass


def test_a_confidence_of_1_2_from_the_model_invalidates_only_that_candidate(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_tool_call({"facts": [fact_candidate(key="too_sure", confidence=1.2), fact_candidate()]})
    record_turn(**THREAD, messages=turn(), flush=True)
    bad, good = Candidate.objects.order_by("position")
    assert (bad.verdict, bad.reasons, bad.raw["confidence"]) == ("rejected", ["invalid"], 1.2)
    assert good.verdict == "accepted" and FactCard.objects.get().id == good.fact_id


def test_a_failed_flush_waits_for_the_backoff_like_any_turn(openai_stub: OpenAIStub) -> None:
    openai_stub.reply_error(500)
    record_turn(**THREAD, messages=turn(), flush=True)
    assert Turn.objects.get().status == "pending"
    assert process_thread(**THREAD, now=later(5)).status == "waiting"
    assert len(openai_stub.requests) == 1


def test_a_disk_failure_while_writing_cards_leaves_the_turns_pending(openai_stub: OpenAIStub, monkeypatch) -> None:
    """Candidates, message ids and the turn's status commit only with card files on disk."""
    from facts.storage import atomic

    def disk_full(path, text):
        raise OSError(28, "No space left on device")

    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    record_turn(**THREAD, messages=turn())
    monkeypatch.setattr(atomic, "_write_temp", disk_full)
    outcome = process_thread(**THREAD, now=later())
    assert outcome.status == "failed"
    stored = Turn.objects.get()
    assert stored.status == "pending" and "No space left" in stored.error
    assert Candidate.objects.count() == 0 and ExtractedMessage.objects.count() == 0
    assert FactCard.objects.count() == 0
    monkeypatch.undo()
    openai_stub.reply_tool_call({"facts": [fact_candidate()]})
    assert process_thread(**THREAD, now=later(3600)).status == "done"
    assert FactCard.objects.count() == 1 and Candidate.objects.get().fact_id == FactCard.objects.get().id
