"""Bounds on every door that reads or writes a memory file (issue 34): a card file
that is not a plain file, one that does not answer, and one larger than
MEMORY_MAX_CARD_BYTES are named and passed over, never waited on or indexed.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from facts.portability.export import export_user
from facts.portability.importer import ImportRefused, import_archive
from facts.storage import fileread
from facts.storage.errors import CardTooLarge
from facts.storage.fileread import ReadRefused, read_bounded
from facts.storage.profilefile import Profile, Section
from facts.storage.store import Store
from facts.storage.writer import commit_profile, save_card
from memoryadmin import rebuild
from retrieval import indexconn
from tests.conftest import reindex_check

from .helpers_reliability.procs import Env

pytestmark = pytest.mark.django_db


@contextlib.contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    """Fail, instead of hanging the suite, when the code under test waits forever."""

    def ring(_signum: int, _frame: Any) -> None:
        raise AssertionError(f"still waiting after {seconds} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _fifo_in_place_of(card_path: Path) -> None:
    card_path.unlink()
    os.mkfifo(card_path)


def test_it_names_a_fifo_in_place_of_a_card_and_goes_on(make_card: Any, store: Store) -> None:
    kept = save_card(make_card(content="Prefers tea."), actor="t")
    gone = save_card(make_card(content="Prefers coffee."), actor="t")
    path = store.card_path(gone)
    _fifo_in_place_of(path)
    with _deadline(60):
        code, report = reindex_check()
    assert code == 2  # a memory file cannot be read
    [problem] = report["unreadable"]
    assert problem["path"] == store.relative(path)
    assert problem["error"].startswith("not a regular file (a FIFO)")
    assert kept.id not in report["index"]["missing"]


def test_doctor_and_reindex_check_finish_with_a_fifo_in_place_of_a_card(proc_env: Env) -> None:
    seeded = proc_env.run(proc_env.helper("seed_cards.py"), "5")
    assert seeded.stdout.strip() == "5"
    card = next(proc_env.root.rglob("fact_*.md"))
    _fifo_in_place_of(card)
    rel = str(card.relative_to(proc_env.root))
    started = time.monotonic()
    check = proc_env.manage("reindex", "--check", check=False, timeout=120)
    doctor = proc_env.manage("doctor", "--skip", "model", check=False, timeout=120)
    assert time.monotonic() - started < 120
    assert check.returncode == 2 and rel in check.stdout and "FIFO" in check.stdout, check.stdout
    said = doctor.stdout + doctor.stderr
    assert doctor.returncode == 1 and f"{rel}: not a regular file (a FIFO)" in said, said


def test_the_drift_check_task_finishes_with_a_fifo_in_place_of_a_card(make_card: Any, store: Store) -> None:
    from memoryadmin import tasks
    from memoryadmin.models import DriftCheck

    card = save_card(make_card(content="Prefers tea."), actor="t")
    _fifo_in_place_of(store.card_path(card))
    check = DriftCheck.objects.create(requested_by="curator")
    with _deadline(60):  # on the worker's (main) thread, as db_worker runs it
        tasks.record_check(check)
    check.refresh_from_db()
    assert check.status == DriftCheck.Status.DONE and not check.clean
    assert [row["path"] for row in check.report["unreadable"]] == [store.relative(store.card_path(card))]


@pytest.mark.parametrize("on_main_thread", [True, False])
def test_a_read_that_does_not_answer_is_given_up_and_named(
    tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch, on_main_thread: bool
) -> None:
    """A hung network mount, stood in for by a read that sleeps (an NFS read cannot be
    made to hang here): the main thread is interrupted by an alarm, another thread stops
    waiting for its helper."""
    path = tmp_path / "card.md"
    path.write_text("---\nid: x\n---\nhello\n")
    settings.MEMORY_FILE_READ_TIMEOUT = 0.3
    real_read = os.read

    def hanging(fd: int, n: int) -> bytes:
        time.sleep(30)
        return real_read(fd, n)

    monkeypatch.setattr(fileread.os, "read", hanging)
    outcome: list[Any] = []

    def read() -> None:
        started = time.monotonic()
        try:
            read_bounded(path)
        except ReadRefused as exc:
            outcome.append((exc.message, time.monotonic() - started))

    if on_main_thread:
        read()
    else:
        reader = threading.Thread(target=read)
        reader.start()
        reader.join(10)
    [(message, seconds)] = outcome
    assert message == "did not answer within 0.3 s (MEMORY_FILE_READ_TIMEOUT)"
    assert seconds < 5


def test_a_card_over_the_limit_is_never_written(make_card: Any, settings: Any, store: Store) -> None:
    settings.MEMORY_MAX_CARD_BYTES = 4096
    card = make_card(content="x " * 3000)
    with pytest.raises(CardTooLarge, match=rf"{card.id}: the card is [\d,]+ bytes, over the limit of 4,096"):
        save_card(card, actor="t")
    assert not store.card_path(card).exists()


def test_a_profile_over_its_limit_is_never_written(settings: Any, store: Store) -> None:
    # The readers refuse a memory.json over 16 × MEMORY_MAX_CARD_BYTES: none is written.
    settings.MEMORY_MAX_CARD_BYTES = 4096

    def grow(profile: Profile) -> Profile:
        profile.set_section("workContext", Section(summary="x " * 40_000))
        return profile

    with pytest.raises(CardTooLarge, match=r"profile of zed: the profile is [\d,]+ bytes, over the limit of 65,536"):
        commit_profile("zed", grow, actor="t")
    assert not store.profile_path("zed").exists()


def test_a_hand_edited_card_over_the_limit_is_named_and_not_indexed(
    make_card: Any, settings: Any, store: Store
) -> None:
    settings.MEMORY_MAX_CARD_BYTES = 4096
    card = save_card(make_card(content="Prefers tea."), actor="t")
    path = store.card_path(card)
    path.write_text(path.read_text().replace("Prefers tea.", "Prefers tea. " + "padding " * 1000))
    result = rebuild.rebuild()
    [(rel, error)] = result.unreadable
    assert rel == store.relative(path)
    assert error.startswith("the card is 8,") and "over the limit of 4,096 (MEMORY_MAX_CARD_BYTES)" in error
    assert card.id not in {row[0] for row in indexconn.connection().execute("SELECT id FROM cards")}


def _exported_then_erased(user_id: str, folder: Path) -> Path:
    """The user's archive, written before the user is erased (ready to import again)."""
    archive = folder / f"{user_id}.zip"
    export_user(user_id, archive)
    call_command("erase", "--user", user_id, "--yes", stdout=io.StringIO())
    return archive


def test_an_archive_holding_a_card_over_the_limit_is_refused_naming_it(
    make_card: Any, settings: Any, store: Store, tmp_path: Path
) -> None:
    card = save_card(make_card(user_id="zed", content="Prefers tea. " + "padding " * 1000), actor="t")
    archive = _exported_then_erased("zed", tmp_path)
    settings.MEMORY_MAX_CARD_BYTES = 4096
    with pytest.raises(ImportRefused, match=r"\.md: the card is [\d,]+ bytes, over the limit of 4,096"):
        import_archive(archive, actor="t")
    assert not store.card_path(card).exists()
    assert card.id in "".join(zipfile.ZipFile(archive).namelist())


def test_an_archive_holding_a_profile_over_the_limit_is_refused_before_any_card(
    make_card: Any, settings: Any, store: Store, tmp_path: Path
) -> None:
    card = save_card(make_card(user_id="zed", content="Prefers tea."), actor="t")

    def grow(profile: Profile) -> Profile:
        profile.set_section("workContext", Section(summary="x " * 40_000))
        return profile

    commit_profile("zed", grow, actor="t")
    archive = _exported_then_erased("zed", tmp_path)
    settings.MEMORY_MAX_CARD_BYTES = 4096
    with pytest.raises(ImportRefused, match=r"memory\.json: the profile is [\d,]+ bytes, over the limit of 65,536"):
        import_archive(archive, actor="t")
    assert not store.card_path(card).exists() and not store.profile_path("zed").exists()
