"""Erasure (`facts.erasure`, `manage.py erase`): a user or a conversation is forgotten
everywhere the system keeps it, the rest stays, and nothing half-kept slips in."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from facts.erasure.guard import ErasureInProgress
from facts.erasure.plan import plan
from facts.erasure.run import _begin, erase
from facts.erasure.scope import Scope
from facts.intake.queue import record_turn
from facts.judging.pipeline import run_turns_now
from facts.models import (
    AuditEvent,
    Candidate,
    Erasure,
    ExtractedMessage,
    ExtractionRun,
    FactCard,
    FactRevision,
    FactUsage,
    ProfileRevision,
    ProfileSection,
    Turn,
)
from facts.storage import writer
from facts.storage.store import get_store
from facts.tasks import process_thread
from memoryadmin import rebuild
from retrieval.models import GoldenQuery
from retrieval.search import search
from tests.erasure_seed import XENA_WORDS, YURI_WORDS, turns

pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded() -> dict[str, Any]:
    for t in turns():
        run_turns_now(**t)
    xena_fact = FactCard.objects.get(user_id="xena", key="tea")
    FactUsage.objects.create(fact_id=xena_fact.id, injected_count=3)
    GoldenQuery.objects.create(user_id="xena", agent_name="coder", query="tea", expected_ids=[xena_fact.id])
    GoldenQuery.objects.create(user_id="yuri", agent_name="coder", query="mornings")
    # A correction whose audit details carry fact text (as the review's overrides do).
    AuditEvent.objects.create(
        actor="rev",
        action=AuditEvent.Action.CORRECT,
        user_id="xena",
        agent_name="coder",
        target=xena_fact.id,
        reason=f"fixed the {XENA_WORDS['thread2_fact']} spelling",
        details={"fact_id": xena_fact.id, "overrides": {"content": XENA_WORDS["thread2_fact"]}},
    )
    return {"tea": xena_fact.id}


def db_text() -> str:
    """Every row the erasure may touch, as text (what a byte search of the DB would see)."""
    parts = []
    for model in (Turn, ExtractionRun, Candidate, FactCard, FactRevision, ProfileSection, ProfileRevision, AuditEvent):
        parts += [json.dumps(row, default=str, ensure_ascii=False) for row in model.objects.values()]
    return "\n".join(parts)


def files_text(root: Path) -> str:
    return "\n".join(
        p.read_bytes().decode("utf-8", "replace")
        for p in root.rglob("*")
        if p.is_file() and ".retrieval" not in p.parts
    )


def test_it_erases_everything_of_a_user_and_keeps_the_other_user(seeded: dict[str, Any], memory_root: Path) -> None:
    assert FactCard.objects.filter(user_id="", content__contains=XENA_WORDS["thread1_project"]).exists()

    report = erase(Scope.of("xena"), actor="tester")

    assert report.counts["cards"] == 2 and report.counts["project_cards"] == 1 and report.counts["turns"] == 2
    text = db_text() + files_text(memory_root)
    for word in XENA_WORDS.values():
        assert word not in text, word
    assert not (memory_root / "users" / "xena").exists()
    for model in (Turn, ExtractionRun, Candidate, ExtractedMessage, ProfileSection, ProfileRevision):
        assert not model.objects.filter(user_id="xena").exists(), model
    assert not FactUsage.objects.exists(), list(FactUsage.objects.values())
    assert list(GoldenQuery.objects.values_list("user_id", flat=True)) == ["yuri"]
    # yuri is intact and still found, project card included.
    assert [h.content for h in search(YURI_WORDS["fact"], user_id="yuri", agent_name="coder")]
    assert search(YURI_WORDS["project"], user_id="yuri", agent_name="coder", project_id="p1")
    assert not search(XENA_WORDS["thread1_project"], user_id="yuri", agent_name="coder", project_id="p1")
    assert rebuild.check().clean


def test_it_erases_one_conversation_and_nothing_else_of_the_user(seeded: dict[str, Any], memory_root: Path) -> None:
    erase(Scope.of("xena", "coder", "x-t1"), actor="tester")

    text = db_text() + files_text(memory_root)
    for name in ("thread1_fact", "thread1_rejected", "thread1_assistant", "thread1_summary", "thread1_project"):
        assert XENA_WORDS[name] not in text, name
    assert not Turn.objects.filter(thread_id="x-t1").exists()
    assert not ExtractionRun.objects.filter(thread_id="x-t1").exists()
    # The other conversation of the same user is untouched, and still found.
    assert Turn.objects.filter(thread_id="x-t2").count() == 1
    assert [h.id for h in search(XENA_WORDS["thread2_fact"], user_id="xena", agent_name="coder")] == [seeded["tea"]]
    assert (memory_root / "users" / "xena" / "memory.json").exists()
    assert rebuild.check().clean


def test_it_lists_what_would_go_in_a_dry_run_and_changes_nothing(seeded: dict[str, Any], memory_root: Path) -> None:
    before_db, before_files = db_text(), files_text(memory_root)

    out = io.StringIO()
    call_command("erase", "--user", "xena", "--json", stdout=out)

    found = json.loads(out.getvalue())
    assert found["dry_run"] is True
    assert found["counts"]["cards"] == 2 and found["counts"]["turns"] == 2 and found["counts"]["candidates"] >= 4
    assert seeded["tea"] in found["ids"]["cards"]
    assert db_text() == before_db and files_text(memory_root) == before_files
    assert not Erasure.objects.exists()


def test_it_erases_with_yes_and_prints_counts(seeded: dict[str, Any]) -> None:
    out = io.StringIO()
    call_command("erase", "--user", "xena", "--yes", stdout=out)
    assert "cards: 2" in out.getvalue()
    assert not FactCard.objects.filter(user_id="xena").exists()


def test_it_audits_ids_and_counts_never_content(seeded: dict[str, Any]) -> None:
    erase(Scope.of("xena"), actor="tester")

    event = AuditEvent.objects.get(action=AuditEvent.Action.ERASE)
    assert event.actor == "tester" and event.user_id == "xena"
    assert event.details["counts"]["cards"] == 2
    assert seeded["tea"] in event.details["ids"]["cards"]
    everything = json.dumps(list(AuditEvent.objects.values()), default=str)
    for word in XENA_WORDS.values():
        assert word not in everything
    # The correction's event is kept (that it happened), its text is not.
    correction = AuditEvent.objects.get(action=AuditEvent.Action.CORRECT)
    assert correction.reason == "" and correction.details == {"fact_id": seeded["tea"], "erased": True}


def test_it_refuses_a_turn_arriving_during_an_erasure_and_the_rerun_finishes(
    seeded: dict[str, Any], make_card: Any
) -> None:
    marker, _ = _begin(Scope.of("xena"), "killed")  # an erasure killed right after it began

    with pytest.raises(ErasureInProgress):
        record_turn(user_id="xena", agent_name="coder", thread_id="x-t9", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(ErasureInProgress):
        run_turns_now(**turns()[1])
    with pytest.raises(ErasureInProgress):
        writer.save_card(make_card(user_id="xena", content="late fact"), actor="worker")
    with pytest.raises(ErasureInProgress):
        writer.commit_profile("xena", lambda p: p, actor="worker")
    # Other users are not held up.
    record_turn(user_id="yuri", agent_name="coder", thread_id="y-t2", messages=[{"role": "user", "content": "hello"}])

    report = erase(Scope.of("xena"), actor="tester")

    assert report.resumed and report.erasure_id == marker.pk
    assert Erasure.objects.get().status == Erasure.Status.DONE
    assert not FactCard.objects.filter(user_id="xena").exists()
    record_turn(user_id="xena", agent_name="coder", thread_id="x-t9", messages=[{"role": "user", "content": "again"}])


def test_it_lets_the_worker_claim_nothing_of_a_user_being_erased(seeded: dict[str, Any], settings: Any) -> None:
    settings.MEMORY_DEBOUNCE_SECONDS = 60  # recorded, not processed yet: the worker comes later
    record_turn(user_id="xena", agent_name="coder", thread_id="x-t5", messages=[{"role": "user", "content": "x"}])
    _begin(Scope.of("xena"), "tester")

    outcome = process_thread("xena", "coder", "x-t5", force=True)

    assert outcome.status == "idle"
    assert Turn.objects.get(thread_id="x-t5").status == Turn.Status.PENDING
    erase(Scope.of("xena"), actor="tester")
    assert not Turn.objects.filter(user_id="xena").exists()


def test_it_refuses_only_that_threads_turns_during_a_thread_erasure(seeded: dict[str, Any]) -> None:
    _begin(Scope.of("xena", "coder", "x-t1"), "tester")
    with pytest.raises(ErasureInProgress):
        record_turn(user_id="xena", agent_name="coder", thread_id="x-t1", messages=[{"role": "user", "content": "a"}])
    record_turn(user_id="xena", agent_name="coder", thread_id="x-t2", messages=[{"role": "user", "content": "b"}])


def test_it_answers_409_to_an_api_turn_of_a_user_being_erased(seeded: dict[str, Any]) -> None:
    from memoryadmin.models import ApiKey

    _key, raw = ApiKey.issue("agent")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    _begin(Scope.of("xena"), "tester")
    body = {"user_id": "xena", "agent_name": "coder", "thread_id": "t", "messages": [{"role": "user", "content": "x"}]}

    response = client.post("/api/v1/turns", body, content_type="application/json")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "erasure_in_progress"
    assert not Turn.objects.filter(thread_id="t").exists()


def test_it_finds_nothing_when_a_finished_erasure_is_rerun(seeded: dict[str, Any]) -> None:
    erase(Scope.of("xena"), actor="tester")
    assert plan(Scope.of("xena")).empty
    report = erase(Scope.of("xena"), actor="tester")
    assert not any(report.counts.values())


def test_it_erases_cards_whose_file_is_already_gone(seeded: dict[str, Any], memory_root: Path) -> None:
    row = FactCard.objects.get(id=seeded["tea"])
    (memory_root / row.path).unlink()  # killed between the file and its mirror row

    erase(Scope.of("xena"), actor="tester")

    assert not FactCard.objects.filter(id=row.id).exists()
    assert rebuild.check().clean


def test_it_keeps_the_other_agents_when_narrowed_to_one(memory_root: Path) -> None:
    for agent in ("coder", "writer"):
        run_turns_now(**{**turns()[1], "agent_name": agent})

    erase(Scope.of("xena", "writer"), actor="tester")

    assert list(FactCard.objects.values_list("agent_name", flat=True)) == ["coder"]
    assert not (get_store().user_dir("xena") / "agents" / "writer").exists()


def test_it_erases_what_came_from_one_projects_turns(seeded: dict[str, Any], memory_root: Path) -> None:
    erase(Scope.of("xena", project_id="p1"), actor="tester")

    assert not Turn.objects.filter(user_id="xena", project_id="p1").exists()
    assert XENA_WORDS["thread1_project"] not in db_text() + files_text(memory_root)
    assert list(FactCard.objects.filter(user_id="xena").values_list("key", flat=True)) == ["tea"]
    assert FactCard.objects.filter(user_id="", project_id="p1").count() == 1  # yuri's project card stays
    assert rebuild.check().clean


def test_it_refuses_ids_that_could_escape_the_root(memory_root: Path) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError):
        call_command("erase", "--user", "x" * 300)
    with pytest.raises(CommandError):
        call_command("erase", "--user", "alice", "--agent", "../../etc")


def test_it_removes_queued_worker_tasks_naming_the_user(settings: Any) -> None:
    from django_tasks_db.models import DBTaskResult

    settings.TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}}
    for user in ("xena", "yuri"):
        record_turn(user_id=user, agent_name="coder", thread_id="t", messages=[{"role": "user", "content": "hi"}])
    assert DBTaskResult.objects.count() == 2

    erase(Scope.of("xena"), actor="tester")

    assert [r.args_kwargs["args"][0] for r in DBTaskResult.objects.all()] == ["yuri"]


def test_it_makes_the_in_process_middleware_drop_a_refused_turn_instead_of_queueing_it(seeded: dict[str, Any]) -> None:
    from memoryadmin.client import LocalMemory
    from memoryadmin.memory_protocol import MemoryContext
    from memoryadmin.outbox import deliver

    memory = LocalMemory()
    _begin(Scope.of("xena"), "tester")
    ctx = MemoryContext(user_id="xena", agent_name="coder", project_id=None, thread_id="t")

    assert deliver(memory, ctx, [{"role": "user", "content": "late", "id": "m"}], flush=False) is False
    assert len(memory.outbox) == 0


def test_it_lets_a_model_call_that_outlives_the_whole_erasure_write_nothing(memory_root: Path) -> None:
    from facts.judging import runs
    from facts.judging.pipeline import _start

    started = _start(**turns()[1], project_id="")  # the run is recorded, the model has answered ...
    erase(Scope.of("xena"), actor="tester")  # ... and the erasure runs to its end meanwhile

    with pytest.raises(ErasureInProgress):
        runs.apply_runs([(started.run, started.parsed, started.ctx)])  # type: ignore[list-item]

    assert not FactCard.objects.filter(user_id="xena").exists()
    assert not (memory_root / "users" / "xena").exists()


def test_it_erases_more_cards_than_one_statement_takes(make_card: Any, memory_root: Path) -> None:
    cards = [make_card(user_id="xena", content=f"Card number {n} of many.") for n in range(1203)]
    writer.commit([writer.Put(c) for c in cards], actor="seed")

    report = erase(Scope.of("xena"), actor="tester")

    assert report.counts["cards"] == 1203 and report.counts["card_revisions"] == 1203
    assert not FactCard.objects.exists() and not FactRevision.objects.exists()
    assert rebuild.check().clean


def test_a_rerun_removes_the_index_entries_of_cards_a_killed_run_deleted_but_the_index_never_heard_of(
    seeded: dict[str, Any],
) -> None:
    from retrieval import reads

    fact_id = seeded["tea"]
    assert reads.card_fields([fact_id])  # indexed
    # A run that remembered the card, deleted its file and mirror row, and was killed
    # before the index's listener ran (a kill between the writer's mirror and its hook).
    marker, _ = _begin(Scope.of("xena"), "killed")
    marker.fact_ids = [fact_id]
    marker.save(update_fields=["fact_ids"])
    store = get_store()
    card_file = next(p for p in store.card_files() if fact_id in p.name)
    card_file.unlink()
    FactCard.objects.filter(id=fact_id).delete()

    erase(Scope.of("xena"), actor="tester")

    assert reads.card_fields([fact_id]) == {}
    assert search("tea", user_id="xena", agent_name="coder") == []
