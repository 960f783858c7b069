"""Hostile archives (issue 33): import goes through the validation every other door
applies — ids and characters, project tenancy, turn states — checks names and sizes
before it inflates anything, and refuses deep nesting with one line. A refused archive
changes nothing; an accepted one never holds a row the API would refuse.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from facts.demo import load_demo
from facts.models import FactCard, Turn
from facts.portability import importer
from facts.storage.ids import normalize_id
from facts.storage.store import Store
from tests.test_export import LI, _export, _jsonl, _members, _refused, _remove_by_hand, _rewrite, _state

pytestmark = pytest.mark.django_db

Emptied = tuple[Path, dict[str, bytes]]


@pytest.fixture
def emptied(store: Store, tmp_path: Path) -> Emptied:
    """The demo users through the real pipeline; li.wei's archive, then li.wei removed
    by hand (so the archive may be imported again)."""
    load_demo(io.StringIO())
    archive = _export(tmp_path)
    members = _members(archive)
    _remove_by_hand(store.root, LI, members)
    return archive, members


def _lines(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()


def _project_card(members: dict[str, bytes]) -> tuple[str, bytes]:
    return next((n, v) for n, v in members.items() if n.startswith("projects/shop-api/"))


# --- project cards: only into projects this user's conversations were about, of its tenant ----


def test_it_refuses_a_card_added_to_another_users_project(emptied: Emptied, store: Store, tmp_path: Path) -> None:
    archive, members = emptied
    name, data = _project_card(members)
    # sam.taylor's project, with a new fact id, claiming li.wei's shop-api run as its source
    forged = data.replace(b"project_id: shop-api", b"project_id: data-pipeline")
    fact_id = Path(name).stem
    new_id = "fact_" + "ab" * 6
    forged = forged.replace(fact_id.encode(), new_id.encode())
    from facts.storage.ids import shard

    target = f"projects/data-pipeline/facts/{shard(new_id)}/{new_id}.md"
    bad = _rewrite(archive, tmp_path / "bad.zip", add={target: forged}, rehash=True)
    _refused(bad, store.root, "data-pipeline.*not .*this user's conversations|run .* was not about")
    assert not (store.root / target).exists()


def _build(members: dict[str, bytes], dst: Path) -> Path:
    """An archive of exactly these members, its manifest listing each with its hash."""
    manifest = json.loads(members["manifest.json"])
    manifest["files"] = {
        name: {"kind": "file", "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for name, data in members.items()
        if name != "manifest.json"
    }
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, json.dumps(manifest).encode() if name == "manifest.json" else data)
    return dst


def test_it_refuses_project_cards_of_another_tenants_project(emptied: Emptied, store: Store, tmp_path: Path) -> None:
    """Everything consistent (cards, runs, turns all say acme:shop), but li.wei has no
    tenant and acme:shop is acme's."""
    _, members = emptied
    folder = normalize_id("acme:shop")
    forged: dict[str, bytes] = {}
    for name, data in members.items():
        if name.startswith("projects/shop-api/"):
            name = name.replace("projects/shop-api/", f"projects/{folder}/")
            data = data.replace(b"project_id: shop-api", b"project_id: acme:shop")
        elif name in ("history/runs.jsonl", "history/turns.jsonl"):
            rows = _jsonl(data)
            for row in rows:
                if row.get("project_id") == "shop-api":
                    row["project_id"] = "acme:shop"
            data = _lines(rows)
        forged[name] = data
    bad = _build(forged, tmp_path / "bad.zip")
    _refused(bad, store.root, "acme:shop.*another tenant")
    assert not (store.root / "projects" / folder).exists()


# --- characters: no NUL, ESC or other control character lands anywhere ----------------------


@pytest.mark.parametrize("char", ["\x00", "\x1b[2J", "\x07", "\x9b"])
def test_it_refuses_a_card_with_control_characters(emptied: Emptied, store: Store, tmp_path: Path, char: str) -> None:
    archive, members = emptied
    name = next(n for n in members if n.startswith("users/") and n.endswith(".md"))
    text = members[name].decode()
    body_start = text.index("---", 3) + 4
    forged = (text[:body_start] + "Evil" + char + " text\n").encode()
    bad = _rewrite(archive, tmp_path / "bad.zip", change={name: forged}, rehash=True)
    _refused(bad, store.root, "control character")
    assert not any(char in content for content in FactCard.objects.values_list("content", flat=True))


@pytest.mark.parametrize(
    ("field", "value"),
    [("thread_id", "t\x1b[31m"), ("content", "hi\x00there"), ("agent_name", "Coder/../x")],
)
def test_it_refuses_a_turn_row_the_api_would_refuse(
    emptied: Emptied, store: Store, tmp_path: Path, field: str, value: str
) -> None:
    archive, members = emptied
    rows = _jsonl(members["history/turns.jsonl"])
    if field == "content":
        rows[0]["messages"][0]["data"]["content"] = value
    else:
        rows[0][field] = value
    bad = _rewrite(archive, tmp_path / "bad.zip", change={"history/turns.jsonl": _lines(rows)}, rehash=True)
    _refused(bad, store.root, r"turns.jsonl line 1: .*(control character|agent_name)")


def test_it_refuses_a_profile_with_control_characters(emptied: Emptied, store: Store, tmp_path: Path) -> None:
    archive, members = emptied
    name = f"users/{normalize_id(LI)}/memory.json"
    profile = json.loads(members[name])
    group = next(g for g in ("user", "history") if profile.get(g))
    section = next(iter(profile[group]))
    profile[group][section]["summary"] = "Likes \x1b[5mblinking\x1b[0m text"
    forged = json.dumps(profile, ensure_ascii=False, indent=2).encode()
    bad = _rewrite(archive, tmp_path / "bad.zip", change={name: forged}, rehash=True)
    _refused(bad, store.root, "memory.json.*control character")


# --- turn states: nothing restored that no worker will ever pick up --------------------------


def test_a_restored_pending_turn_is_queued_for_the_worker(emptied: Emptied, store: Store, settings: Any) -> None:
    from django_tasks_db.models import DBTaskResult

    settings.TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    archive, members = emptied
    rows = _jsonl(members["history/turns.jsonl"])
    rows[0].update(status="processing", claimed_by="deadbeef" * 4, run=None, processed_at=None)
    rows[0].pop("run_id", None)
    bad = _rewrite(archive, archive.parent / "pending.zip", change={"history/turns.jsonl": _lines(rows)}, rehash=True)
    importer.import_archive(bad, actor="test")
    restored = Turn.objects.get(pk=rows[0]["id"])
    assert restored.status == Turn.Status.PENDING and restored.claimed_by == "" and restored.lease_until is None
    queued = [json.dumps(r.args_kwargs) for r in DBTaskResult.objects.all()]
    assert any(restored.thread_id in args and LI in args for args in queued), queued


# --- nesting and names: one line, nothing inflated first -----------------------------------------


@pytest.mark.parametrize("where", ["history/candidates.jsonl", "manifest.json", "memory.json"])
def test_deep_nesting_is_refused_with_one_line(emptied: Emptied, store: Store, tmp_path: Path, where: str) -> None:
    archive, members = emptied
    deep = ("[" * 100_000 + "]" * 100_000).encode()
    if where == "manifest.json":
        manifest = json.loads(members["manifest.json"])
        text = json.dumps(manifest)[:-1] + ', "extra": ' + deep.decode() + "}"
        bad = tmp_path / "bad.zip"
        with zipfile.ZipFile(bad, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in members.items():
                zf.writestr(name, text.encode() if name == "manifest.json" else data)
    elif where == "memory.json":
        name = f"users/{normalize_id(LI)}/memory.json"
        bad = _rewrite(archive, tmp_path / "bad.zip", change={name: b'{"x": ' + deep + b"}"}, rehash=True)
    else:
        data = members[where] + b'{"id": 1, "x": ' + deep + b"}\n"
        bad = _rewrite(archive, tmp_path / "bad.zip", change={where: data}, rehash=True)
    before = _state(store.root)
    with pytest.raises(CommandError) as caught:
        call_command("import", str(bad), stdout=io.StringIO())
    message = str(caught.value)
    assert "nested deeper than" in message and "\n" not in message and "Traceback" not in message
    assert _state(store.root) == before


def test_a_bad_file_name_is_refused_before_any_member_is_inflated(
    emptied: Emptied, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive, _ = emptied
    big = os.urandom(2 * 1024 * 1024).hex().encode()  # 4 MiB that compress 2×: no zip bomb
    bad = _rewrite(
        archive, tmp_path / "bad.zip", add={"history/zzz-filler.jsonl": big, "notes/evil.txt": b"x"}, rehash=True
    )
    opened: list[str] = []
    real_open = zipfile.ZipFile.open

    def spy(self: zipfile.ZipFile, name: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(name if isinstance(name, str) else name.filename)
        return real_open(self, name, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", spy)
    _refused(bad, store.root, "notes/evil.txt|history/zzz-filler.jsonl")
    assert opened == [], f"read before refusing: {opened}"


@pytest.mark.parametrize(
    ("name", "size"),
    [("users/{folder}/agents/coder/facts/00/fact_000000000000.md", 2 * 1024 * 1024)],
)
def test_a_card_larger_than_any_card_is_refused_by_its_declared_size(
    emptied: Emptied, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, size: int
) -> None:
    archive, _ = emptied
    member = name.format(folder=normalize_id(LI))
    bad = _rewrite(archive, tmp_path / "bad.zip", add={member: os.urandom(size // 2).hex().encode()}, rehash=True)
    opened: list[str] = []
    real_open = zipfile.ZipFile.open

    def spy(self: zipfile.ZipFile, name: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(name if isinstance(name, str) else name.filename)
        return real_open(self, name, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", spy)
    _refused(bad, store.root, "larger than a card")
    assert member not in opened


def test_an_honest_archive_still_round_trips(emptied: Emptied, store: Store) -> None:
    archive, _ = emptied
    summary = importer.import_archive(archive, actor="test")
    assert summary.restored["cards"] > 0 and summary.restored["project_cards"] > 0
    call_command("reindex", "--check", stdout=io.StringIO())
