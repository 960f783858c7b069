"""Memory is personal: every folder and file the service creates under MEMORY_ROOT is for
its own user only (folders 0700, files 0600), whatever the umask, and `doctor` agrees."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from facts.storage.profilefile import Section
from facts.storage.writer import commit_profile, delete_card, save_card
from memoryadmin import api_auth
from retrieval.search import search

from .helpers_reliability.procs import on_postgres

pytestmark = pytest.mark.django_db


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The most permissive umask a service could inherit: only our own modes protect."""
    previous = os.umask(0)
    yield
    os.umask(previous)


@pytest.fixture
def fresh_root(settings: Any, tmp_path: Path) -> Path:
    """A MEMORY_ROOT that does not exist yet, two levels down, as on a first start."""
    root = tmp_path / "var" / "memory"
    settings.MEMORY_ROOT = root
    return root


def _modes(root: Path) -> dict[str, str]:
    found = {".": oct(stat.S_IMODE(root.stat().st_mode))}
    for path in root.rglob("*"):
        found[path.relative_to(root).as_posix()] = oct(stat.S_IMODE(path.lstat().st_mode))
    return found


def _file_findings() -> list[str]:
    out = StringIO()
    with contextlib.suppress(CommandError):  # other checks (DEBUG, the model) may fail here
        call_command("doctor", "--json", "--skip", "model", stdout=out, stderr=StringIO())
    return [f["message"] for f in json.loads(out.getvalue())["findings"] if f["check"] == "files"]


def _use_the_memory(make_card: Any) -> None:
    """Every kind of write and read that creates something under MEMORY_ROOT."""
    card = save_card(make_card(content="Prefers green tea."), actor="t")
    save_card(make_card(user_id=None, agent_name=None, project_id="apollo", content="Uses Postgres."), actor="t")
    commit_profile(
        "alice", lambda p: (p.set_section("workContext", Section(summary="Backend developer.")), p)[1], actor="t"
    )
    assert [hit.id for hit in search("green tea", user_id="alice", agent_name="coder")] == [card.id]
    delete_card(save_card(make_card(content="Short-lived."), actor="t"), actor="t")
    call_command("reindex", "--no-progress", stdout=StringIO())
    api_auth.record_failure("127.0.0.1")  # the agents' API counters (rate limit, wrong keys)


def test_it_creates_every_memory_folder_0700_and_every_file_0600(
    fresh_root: Path, make_card: Any, open_umask: None
) -> None:
    _use_the_memory(make_card)
    modes = _modes(fresh_root)
    folders = {name: mode for name, mode in modes.items() if (fresh_root / name).is_dir()}
    # A derived file's stable name is a link to its generation (facts/storage/sqlitegen.py): the
    # link has no mode of its own, the generation file it names is listed too.
    files = {
        name: mode
        for name, mode in modes.items()
        if not (fresh_root / name).is_dir() and not (fresh_root / name).is_symlink()
    }
    # the kinds of things that must be there for this test to mean anything
    assert any(name.endswith(".md") for name in files)
    assert any(name.endswith("memory.json") for name in files)
    assert any(name.startswith(".retrieval/") for name in files)
    assert any(name.startswith(".locks/") for name in files)
    # The API's rate-limit counters are a file only on SQLite; on PostgreSQL they are rows
    # (memoryadmin.ratelimit), so every machine counts against one limit.
    assert any(name.startswith(".api/") for name in files) or on_postgres()
    assert fresh_root.parent.stat().st_mode & 0o077 == 0, "the parent folder the service created is private too"
    assert {name: mode for name, mode in folders.items() if mode != "0o700"} == {}
    assert {name: mode for name, mode in files.items() if mode != "0o600"} == {}


def test_doctor_finds_nothing_open_to_other_users_on_a_fresh_root(
    fresh_root: Path, make_card: Any, open_umask: None
) -> None:
    _use_the_memory(make_card)
    messages = _file_findings()
    assert not [m for m in messages if "every user" in m], messages


def test_doctor_still_warns_about_a_root_someone_opened_to_everyone(fresh_root: Path, make_card: Any) -> None:
    save_card(make_card(), actor="t")
    os.chmod(fresh_root, 0o755)
    assert any("can be read by every user" in m for m in _file_findings())


def test_doctor_also_looks_at_the_search_index_folder(fresh_root: Path, make_card: Any, open_umask: None) -> None:
    _use_the_memory(make_card)
    os.chmod(fresh_root / ".retrieval", 0o755)
    assert any(".retrieval can be read by every user" in m for m in _file_findings())
