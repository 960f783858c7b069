"""An erasure scrubs a machine-local search index (MEMORY_INDEX_DIR) too (issue 24)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from facts.erasure.run import erase
from facts.erasure.scope import Scope
from facts.writer import save_card
from retrieval import index

pytestmark = pytest.mark.django_db


def test_it_leaves_no_byte_of_an_erased_user_in_a_local_index(
    settings: Any, tmp_path: Path, memory_root: Path, make_card
) -> None:
    settings.MEMORY_INDEX_DIR = str(tmp_path / "local-index")
    index.reset()
    secret = "Xenaphobicword keeps her passport in the blue folder."
    save_card(make_card(user_id="xena", content=secret), actor="t")
    save_card(make_card(user_id="yuri", content="Yuri prefers green tea."), actor="t")
    assert (tmp_path / "local-index" / "index.sqlite3").exists()
    erase(Scope.of("xena"), actor="tester")
    for path in (tmp_path / "local-index").iterdir():
        assert b"xenaphobicword" not in path.read_bytes().lower(), path.name
    index.reset()


def test_another_machines_follower_drops_and_scrubs_an_erased_user(
    settings: Any, tmp_path: Path, memory_root: Path, make_card
) -> None:
    from retrieval.follow import Follower

    settings.MEMORY_CHANGE_LOG = True
    machine_a, machine_b = tmp_path / "a-index", tmp_path / "b-index"

    def on(machine: Path) -> None:
        settings.MEMORY_INDEX_DIR = str(machine)
        index.reset()

    on(machine_b)
    follower = Follower.from_now()
    index.connection()
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
    index.reset()
