"""A batch that fails half-way never leaves files and mirror apart."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from facts.mirror import mirror_drift
from facts.models import AuditEvent, FactCard
from facts.storage import atomic
from facts.storage.errors import LockTimeout, RevisionConflict
from facts.storage.snapshots import snapshot
from facts.storage.store import Store
from facts.storage.writer import Put, commit, save_card

pytestmark = pytest.mark.django_db


def test_a_revision_conflict_late_in_a_batch_writes_nothing(store: Store, make_card) -> None:
    old = save_card(make_card(), actor="seed")
    save_card(old.model_copy(update={"content": "v2"}), actor="seed")
    fresh = make_card()
    with pytest.raises(RevisionConflict):
        commit([Put(fresh), Put(old.model_copy(update={"content": "stale"}), expected_revision=1)], actor="x")
    assert not store.card_path(fresh).exists(), "the first card of a refused batch was written"
    assert mirror_drift(snapshot(store)).clean


@pytest.mark.parametrize("with_record", [False, True])
def test_a_disk_failure_half_way_still_mirrors_what_was_written(
    store: Store, make_card, monkeypatch, with_record: bool
) -> None:
    """What landed is mirrored; the caller's records, which commit with the mirror
    only once every file is on disk, are rolled back."""
    real = atomic._write_temp
    first, second = make_card(), make_card()

    def failing(path, text):
        if path == store.card_path(second):
            raise OSError(28, "No space left on device")
        return real(path, text)

    def record() -> None:
        AuditEvent.objects.create(action="test", actor="x")

    monkeypatch.setattr(atomic, "_write_temp", failing)
    with pytest.raises(OSError):
        commit([Put(first), Put(second)], actor="x", record=record if with_record else None)
    assert FactCard.objects.filter(id=first.id).exists()
    assert not store.card_path(second).exists()
    assert not AuditEvent.objects.filter(action="test").exists(), "a record claimed a batch that did not land"
    assert mirror_drift(snapshot(store)).clean


def test_a_card_named_twice_in_one_batch_gets_two_revisions(store: Store, make_card) -> None:
    card = make_card()
    result = commit([Put(card), Put(card.model_copy(update={"content": "second"}), expected_revision=1)], actor="x")
    assert [c.revision for c in result.written] == [1, 2]
    assert store.read_card_at(store.card_path(card)).content == "second"


def test_commits_wait_for_a_rebuild_catch_up_and_time_out_cleanly(memory_root, make_card) -> None:
    store = Store(memory_root, lock_timeout=0.3)
    held, release = threading.Event(), threading.Event()

    def rebuild_catch_up() -> None:
        with store.commit_gate(exclusive=True):
            held.set()
            release.wait(5)

    thread = threading.Thread(target=rebuild_catch_up)
    thread.start()
    held.wait(5)
    card = make_card()
    try:
        with pytest.raises(LockTimeout):
            commit([Put(card)], actor="x", store=store)
        assert not store.card_path(card).exists()
    finally:
        release.set()
        thread.join()
    commit([Put(card)], actor="x", store=store)
    assert store.card_path(card).exists()


def test_a_failing_record_still_mirrors_the_files_it_waited_for(store: Store, make_card) -> None:
    cards = [make_card(), make_card()]

    def record() -> None:
        raise RuntimeError("the caller's insert failed")

    with pytest.raises(RuntimeError):
        commit([Put(c) for c in cards], actor="x", record=record)
    assert all(store.card_path(c).exists() for c in cards)
    assert FactCard.objects.filter(id__in=[c.id for c in cards]).count() == 2
    assert mirror_drift(snapshot(store)).clean


def test_a_batch_commits_its_records_and_mirror_together(store: Store, make_card) -> None:
    card = make_card()
    seen: list[tuple[bool, bool]] = []

    def record() -> None:
        # Runs once the card is on disk, in the transaction its mirror row then joins.
        seen.append((store.card_path(card).exists(), FactCard.objects.filter(id=card.id).exists()))
        AuditEvent.objects.create(action="test", actor="x")

    commit([Put(card)], actor="x", record=record)
    assert seen == [(True, False)]
    assert AuditEvent.objects.filter(action="test").count() == 1 and FactCard.objects.filter(id=card.id).exists()
    commit([], actor="x", record=record)  # nothing to write: the records still run
    assert AuditEvent.objects.filter(action="test").count() == 2


@pytest.mark.django_db(transaction=True)  # no test transaction around it
def test_no_transaction_is_open_while_the_files_are_written(
    store: Store, make_card, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On SQLite an open write transaction holds the database's write lock: the web's
    # turns must not wait for a batch of fsyncs.
    real, open_during_write = atomic._write_temp, []

    def write_temp(path: Any, data: str) -> str:
        open_during_write.append(connection.in_atomic_block)
        return real(path, data)

    monkeypatch.setattr(atomic, "_write_temp", write_temp)
    commit([Put(make_card()), Put(make_card())], actor="x", record=lambda: None)
    assert open_during_write == [False, False]
