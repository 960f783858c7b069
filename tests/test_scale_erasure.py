"""An erasure scrubs a machine-local search index (MEMORY_INDEX_DIR) too (issue 24)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from facts.erasure.run import erase
from facts.erasure.scope import Scope
from facts.storage.writer import save_card
from retrieval import indexconn

pytestmark = pytest.mark.django_db


def test_it_leaves_no_byte_of_an_erased_user_in_a_local_index(
    settings: Any, tmp_path: Path, memory_root: Path, make_card
) -> None:
    settings.MEMORY_INDEX_DIR = str(tmp_path / "local-index")
    indexconn.reset()
    indexconn.connection()
    secret = "Xenaphobicword keeps her passport in the blue folder."
    save_card(make_card(user_id="xena", content=secret), actor="t")
    save_card(make_card(user_id="yuri", content="Yuri prefers green tea."), actor="t")
    assert (tmp_path / "local-index" / "index.sqlite3").exists()
    erase(Scope.of("xena"), actor="tester")
    for path in (tmp_path / "local-index").iterdir():
        assert b"xenaphobicword" not in path.read_bytes().lower(), path.name
    indexconn.reset()


def test_another_machines_follower_drops_and_scrubs_an_erased_user(
    settings: Any, tmp_path: Path, memory_root: Path, make_card
) -> None:
    from retrieval.follow import Follower

    settings.MEMORY_CHANGE_LOG = True
    machine_a, machine_b = tmp_path / "a-index", tmp_path / "b-index"

    def on(machine: Path) -> None:
        settings.MEMORY_INDEX_DIR = str(machine)
        indexconn.reset()

    on(machine_b)
    follower = Follower.from_now()
    indexconn.connection()
    on(machine_a)
    save_card(make_card(user_id="xena", content="Xenaphobicword keeps her passport in the blue folder."), actor="t")
    on(machine_b)
    follower.poll()
    held = b"".join(path.read_bytes() for path in machine_b.iterdir()).lower()
    assert b"xenaphobicword" in held  # B followed A's write
    on(machine_a)
    erase(Scope.of("xena"), actor="tester")
    on(machine_b)
    follower.poll()
    for path in machine_b.iterdir():
        assert b"xenaphobicword" not in path.read_bytes().lower(), path.name
    indexconn.reset()


def test_a_poll_that_only_sees_an_erasure_finish_keeps_it(
    settings: Any, tmp_path: Path, memory_root: Path, make_card, monkeypatch
) -> None:
    """The erased cards' changes were applied by an earlier poll, before the erasure was
    marked done: the poll that then scrubs must save `erasures_seen` at once, or the
    next start scrubs the index's files again."""
    from facts.models import Erasure
    from retrieval import follow
    from retrieval.follow import Follower

    settings.MEMORY_CHANGE_LOG = True
    settings.MEMORY_INDEX_DIR = str(tmp_path / "b-index")
    indexconn.reset()
    follower = Follower.from_now()
    indexconn.connection()
    follower.poll()
    save_card(make_card(user_id="xena", content="Xenaphobicword keeps her passport in the blue folder."), actor="t")
    erase(Scope.of("xena"), actor="tester")
    done = Erasure.objects.get()
    Erasure.objects.update(status=Erasure.Status.RUNNING)
    follower.poll()  # applies the deletes; nothing to scrub yet
    assert follower.erasures_seen == 0
    Erasure.objects.update(status=Erasure.Status.DONE)
    scrubs: list[Path] = []
    monkeypatch.setattr(follow, "scrub_sqlite", scrubs.append)

    assert follower.poll() == 0  # no card change: only the erasure finished
    assert scrubs
    assert follow._load_state().erasures_seen == done.id

    scrubs.clear()
    indexconn.reset()
    resumed = Follower.resume()
    resumed.poll()
    assert resumed.erasures_seen == done.id
    assert not scrubs  # kept: not scrubbed a second time
    indexconn.reset()
