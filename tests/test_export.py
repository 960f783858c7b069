"""Export and import of everything held about one user (`facts.portability`,
`manage.py export` / `import`, the dashboard's Export page)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from facts.demo import load_demo
from facts.erasure.run import erase
from facts.erasure.scope import Scope
from facts.models import (
    AuditEvent,
    Candidate,
    ExtractedMessage,
    ExtractionRun,
    FactCard,
    FactRevision,
    FactUsage,
    ProfileRevision,
    ProfileSection,
    Turn,
)
from facts.portability import importer, unpack
from facts.portability.archive import FORMAT
from facts.portability.export import export_user
from facts.storage.ids import normalize_id
from facts.storage.store import Store
from retrieval.models import GoldenQuery
from retrieval.search import search

from .helpers_reliability.procs import Env, fresh_env

pytestmark = pytest.mark.django_db

LI = "li.wei@example.com"
SAM = "sam.taylor"
LI_DIR = "users/" + normalize_id(LI)
HISTORY_MODELS = [Candidate, Turn, ExtractedMessage, ExtractionRun, AuditEvent, FactUsage, GoldenQuery]


@pytest.fixture
def demo(store: Store) -> Store:
    """The two demo users through the real pipeline, plus a reviewed candidate, a failed
    run whose error quotes the model key, usage counters and a golden query."""
    load_demo(io.StringIO())
    reviewer = User.objects.create_user("rita")
    Candidate.objects.filter(user_id=LI, verdict="rejected").update(
        review_state="dismissed", reviewed_by=reviewer, review_note="not durable"
    )
    ExtractionRun.objects.create(
        user_id=LI,
        agent_name="coder",
        thread_id="lw-failed",
        status=ExtractionRun.Status.FAILED,
        error="401 Incorrect API key provided: sk-live-abcdef0123456789. Authorization: Bearer sk-live-abcdef0123456789",
    )
    card = FactCard.objects.filter(user_id=LI).first()
    assert card is not None
    FactUsage.objects.create(fact_id=card.id, injected_count=3, searched_count=2)
    GoldenQuery.objects.create(user_id=LI, agent_name="coder", query="中文", expected_ids=[card.id])
    return store


def _export(tmp_path: Path, user_id: str = LI) -> Path:
    out = tmp_path / "export.zip"
    export_user(user_id, out)
    return out


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def _jsonl(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.decode().splitlines() if line.strip()]


def _files(root: Path, *tops: str) -> dict[str, bytes]:
    out = {}
    for top in tops:
        base = root / top
        for path in sorted(base.rglob("*")) if base.exists() else []:
            if path.is_file() and not path.name.startswith("."):
                out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


def _project_files(root: Path, members: dict[str, bytes]) -> dict[str, bytes]:
    return {name: (root / name).read_bytes() for name in members if name.startswith("projects/")}


def _mirror_of(user_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    cards: list[dict[str, Any]] = list(FactCard.objects.filter(user_id=user_id).order_by("id").values())  # type: ignore[arg-type]
    sections: list[dict[str, Any]] = list(ProfileSection.objects.filter(user_id=user_id).order_by("name").values())  # type: ignore[arg-type]
    for row in sections:
        row.pop("id")  # a derived row, re-created by each write
    return cards, sections


def _history_of(user_id: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    models: tuple[Any, ...] = (Candidate, Turn, ExtractionRun, ExtractedMessage, GoldenQuery)
    for model in models:
        rows: list[dict[str, Any]] = list(model.objects.filter(user_id=user_id).order_by("pk").values())
        for row in rows:
            row.pop("error", None)  # masked on export (credentials), compared apart
            if model in (ExtractedMessage, GoldenQuery):
                row.pop("id")  # no other record names them: new ids on import
        out[model.__name__] = rows
    return out


def _remove_by_hand(root: Path, user_id: str, members: dict[str, bytes]) -> None:
    """What an erasure removes, done by hand (the erasure service is built elsewhere)."""
    shutil.rmtree(root / "users" / normalize_id(user_id))
    project_ids = [Path(name).stem for name in members if name.startswith("projects/")]
    for name in members:
        if name.startswith("projects/"):
            (root / name).unlink()
    ids = list(FactCard.objects.filter(user_id=user_id).values_list("id", flat=True)) + project_ids
    FactCard.objects.filter(id__in=ids).delete()
    FactRevision.objects.filter(fact_id__in=ids).delete()
    FactUsage.objects.filter(fact_id__in=ids).delete()
    ProfileSection.objects.filter(user_id=user_id).delete()
    ProfileRevision.objects.filter(user_id=user_id).delete()
    for model in (Candidate, Turn, ExtractedMessage, ExtractionRun, GoldenQuery):
        model.objects.filter(user_id=user_id).delete()
    call_command("reindex", "--no-progress", stdout=io.StringIO())  # the index forgets them too


def _rewrite(
    src: Path,
    dst: Path,
    *,
    change: dict[str, bytes] | None = None,
    add: dict[str, bytes] | None = None,
    rehash: bool,
) -> Path:
    """A copy of the archive with members changed or added; `rehash` also fixes the
    manifest (what an attacker who knows the format would do)."""
    members = _members(src)
    members.update(change or {})
    members.update(add or {})
    if rehash:
        manifest = json.loads(members["manifest.json"])
        for name, data in members.items():
            if name != "manifest.json":
                manifest["files"][name] = {
                    "kind": "card",
                    "bytes": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                }
        members["manifest.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return dst


def _state(root: Path) -> tuple[dict[str, bytes], dict[str, int]]:
    files = _files(root, "users", "projects")
    rows = {m.__name__: m.objects.count() for m in (*HISTORY_MODELS, FactCard, FactRevision, ProfileSection)}  # type: ignore[attr-defined]
    rows["ProfileRevision"] = ProfileRevision.objects.count()
    return files, rows


# --- the archive ------------------------------------------------------------------


def test_it_puts_each_kind_in_the_archive_byte_identical_and_readable_with_zipfile_and_json(
    demo: Store, tmp_path: Path
) -> None:
    members = _members(_export(tmp_path))
    manifest = json.loads(members["manifest.json"])
    assert manifest["format"] == FORMAT and manifest["format_version"] == 1
    assert manifest["user_id"] == LI and manifest["created_at"].endswith("Z")
    assert "README.txt" in members and LI in members["README.txt"].decode()

    # Every file is listed with its SHA-256, and SHA256SUMS agrees (sha256sum -c).
    for name, entry in manifest["files"].items():
        assert hashlib.sha256(members[name]).hexdigest() == entry["sha256"]
        assert len(members[name]) == entry["bytes"]
    assert set(manifest["files"]) == set(members) - {"manifest.json"}
    sums: dict[str, str] = dict(reversed(line.split("  ", 1)) for line in members["SHA256SUMS"].decode().splitlines())  # type: ignore[misc]
    assert all(hashlib.sha256(members[name]).hexdigest() == digest for name, digest in sums.items())

    # Cards and profile: the same relative paths as under MEMORY_ROOT, byte for byte.
    on_disk = _files(demo.root, LI_DIR)
    assert {name: members[name] for name in on_disk} == on_disk
    assert f"{LI_DIR}/memory.json" in on_disk
    cards = [n for n in on_disk if n.endswith(".md")]
    assert manifest["counts"]["cards"] == len(cards) == FactCard.objects.filter(user_id=LI).count() >= 5
    assert manifest["counts"]["profile"] == 1

    # Project cards whose evidence came from this user's runs (shop-api), not the others.
    projects = [n for n in members if n.startswith("projects/")]
    assert projects and all(n.startswith("projects/shop-api/") for n in projects)
    assert _project_files(demo.root, members) == {n: members[n] for n in projects}

    candidates = _jsonl(members["history/candidates.jsonl"])
    assert len(candidates) == Candidate.objects.filter(user_id=LI).count() == manifest["counts"]["candidates"]
    by_id = {row["id"]: row for row in candidates}
    for cand in Candidate.objects.filter(user_id=LI):
        row = by_id[cand.pk]
        assert (row["verdict"], row["reasons"], row["content"], row["evidence_text"]) == (
            cand.verdict,
            cand.reasons,
            cand.content,
            cand.evidence_text,
        )
    assert {"accepted", "rejected"} <= {row["verdict"] for row in candidates}
    assert any(row["reviewed_by"] == "rita" and row["review_state"] == "dismissed" for row in candidates)

    turns = _jsonl(members["history/turns.jsonl"])
    assert [(t["id"], t["messages"]) for t in turns] == [
        (t.pk, t.messages) for t in Turn.objects.filter(user_id=LI).order_by("pk")
    ]
    runs = _jsonl(members["history/runs.jsonl"])
    assert len(runs) == ExtractionRun.objects.filter(user_id=LI).count()
    assert all(r["filtered_rows"] is not None for r in runs)
    assert len(_jsonl(members["history/fact_revisions.jsonl"])) >= len(cards)
    assert _jsonl(members["history/usage.jsonl"])[0]["injected_count"] == 3
    assert _jsonl(members["history/golden_queries.jsonl"])[0]["query"] == "中文"


def test_it_exports_runs_without_credentials(demo: Store, tmp_path: Path) -> None:
    members = _members(_export(tmp_path))
    everything = b"".join(members.values())
    assert b"abcdef0123456789" not in everything
    failed = [r for r in _jsonl(members["history/runs.jsonl"]) if r["status"] == "failed"]
    assert "401 Incorrect API key provided: [redacted]" in failed[0]["error"]


def test_another_users_data_is_never_in_the_archive(demo: Store, tmp_path: Path) -> None:
    members = _members(_export(tmp_path))
    everything = b"\n".join(members.values()).decode()
    assert SAM not in everything
    assert "data-pipeline" not in everything
    for row in FactCard.objects.exclude(user_id=LI).exclude(project_id="shop-api"):
        assert row.id not in everything
        assert row.content not in everything
    for turn in Turn.objects.filter(user_id=SAM):
        assert turn.thread_id not in everything
        for message in turn.messages:
            if len(message.get("content") or "") > 12:
                assert message["content"] not in everything
    for section in ProfileSection.objects.filter(user_id=SAM).exclude(summary=""):
        assert section.summary not in everything


def test_an_unknown_user_gets_an_archive_with_nothing_but_its_readme(store: Store, tmp_path: Path) -> None:
    members = _members(_export(tmp_path, "nobody"))
    manifest = json.loads(members["manifest.json"])
    assert set(manifest["counts"].values()) == {0}
    assert not [n for n in members if n.startswith(("users/", "projects/"))]


# --- import -----------------------------------------------------------------------


def test_export_remove_by_hand_import_gives_the_same_cards_profile_and_history(demo: Store, tmp_path: Path) -> None:
    archive = _export(tmp_path)
    members = _members(archive)
    files_before = _files(demo.root, LI_DIR)
    projects_before = _project_files(demo.root, members)
    mirror_before = _mirror_of(LI)
    rows_before = _history_of(LI)
    revisions_before = sorted(
        FactRevision.objects.filter(fact_id__in=[r["id"] for r in mirror_before[0]]).values_list(
            "fact_id", "revision", "text", "actor"
        )
    )
    sam_before = _files(demo.root, "users/" + normalize_id(SAM)), _mirror_of(SAM)

    _remove_by_hand(demo.root, LI, members)
    assert not search("中文", user_id=LI, agent_name="coder")
    summary = importer.import_archive(archive, actor="test")

    assert summary.restored["cards"] == len(mirror_before[0])
    assert _files(demo.root, LI_DIR) == files_before  # same ids, front matter, content: same bytes
    assert _project_files(demo.root, members) == projects_before
    assert _mirror_of(LI) == mirror_before
    assert _history_of(LI) == rows_before
    # The one difference: credentials quoted in an error never leave, so never come back.
    failed = ExtractionRun.objects.get(user_id=LI, status="failed")
    assert "sk-live" not in failed.error and "[redacted]" in failed.error
    assert (
        sorted(
            FactRevision.objects.filter(fact_id__in=[r["id"] for r in mirror_before[0]]).values_list(
                "fact_id", "revision", "text", "actor"
            )
        )
        == revisions_before
    )
    assert (_files(demo.root, "users/" + normalize_id(SAM)), _mirror_of(SAM)) == sam_before
    call_command("reindex", "--check", stdout=io.StringIO())  # raises CommandError on drift
    assert search("中文", user_id=LI, agent_name="coder")

    # The ids kept by the import never collide with the next rows (PostgreSQL sequences).
    run = ExtractionRun.objects.create(user_id="new", agent_name="coder")
    assert run.pk > max(r["id"] for r in _jsonl(members["history/runs.jsonl"]))
    event = AuditEvent.objects.filter(action="import").get()
    assert event.user_id == LI and event.details["restored"]["cards"] == len(mirror_before[0])


def test_export_erase_import_gives_the_same_cards_and_profile(demo: Store, tmp_path: Path) -> None:
    archive = _export(tmp_path)
    members = _members(archive)
    files_before = _files(demo.root, LI_DIR)
    projects_before = _project_files(demo.root, members)
    mirror_before = _mirror_of(LI)
    sam_before = _files(demo.root, "users/" + normalize_id(SAM)), _mirror_of(SAM)

    report = erase(Scope.of(LI), actor="test")
    assert report.counts["cards"] and not (demo.root / LI_DIR).exists()
    assert not FactCard.objects.filter(user_id=LI).exists() and not Turn.objects.filter(user_id=LI).exists()
    assert not search("中文", user_id=LI, agent_name="coder")

    importer.import_archive(archive, actor="test")

    assert _files(demo.root, LI_DIR) == files_before  # same cards (ids, front matter, body) and memory.json
    assert _project_files(demo.root, members) == projects_before
    assert _mirror_of(LI) == mirror_before
    assert Turn.objects.filter(user_id=LI).count() == len(_jsonl(members["history/turns.jsonl"]))
    assert (_files(demo.root, "users/" + normalize_id(SAM)), _mirror_of(SAM)) == sam_before
    call_command("reindex", "--check", stdout=io.StringIO())  # raises CommandError on drift
    assert search("中文", user_id=LI, agent_name="coder")


def test_it_refuses_to_import_where_the_user_already_has_memory(demo: Store, tmp_path: Path) -> None:
    archive = _export(tmp_path)
    before = _state(demo.root)
    with pytest.raises(CommandError, match="already has memory here"):
        call_command("import", str(archive), stdout=io.StringIO())
    assert _state(demo.root) == before


def test_a_check_only_import_reports_and_changes_nothing(demo: Store, tmp_path: Path) -> None:
    archive = _export(tmp_path)
    _remove_by_hand(demo.root, LI, _members(archive))
    before = _state(demo.root)
    out = io.StringIO()
    call_command("import", str(archive), "--check", stdout=out)
    assert "Would restore user 'li.wei@example.com': cards 5" in out.getvalue()
    assert _state(demo.root) == before


def _refused(archive: Path, root: Path, match: str) -> None:
    before = _state(root)
    with pytest.raises(importer.ImportRefused, match=match):
        importer.import_archive(archive, actor="test")
    assert _state(root) == before


@pytest.fixture
def emptied(demo: Store, tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    archive = _export(tmp_path)
    members = _members(archive)
    _remove_by_hand(demo.root, LI, members)
    return archive, members


def test_it_refuses_a_card_whose_bytes_do_not_match_the_manifest(
    emptied: tuple[Path, dict[str, bytes]], store: Store, tmp_path: Path
) -> None:
    archive, members = emptied
    name = next(n for n in members if n.endswith(".md"))
    tampered = members[name].replace(b"confidence: 0.", b"confidence: 1.")[:-1] + b"!\n"
    bad = _rewrite(archive, tmp_path / "bad.zip", change={name: tampered}, rehash=False)
    _refused(bad, store.root, "SHA-256 does not match")


@pytest.mark.parametrize(
    "name",
    [
        "../evil.md",
        "users/../../evil.md",
        "/etc/evil.md",
        "users/x/..\\..\\evil.md",
        f"users/{normalize_id(SAM)}/agents/coder/facts/00/fact_000000000000.md",
        f"users/{normalize_id(SAM)}/memory.json",
        ".retrieval/index.sqlite3",
        "history/../../evil.jsonl",
    ],
)
def test_it_refuses_entries_outside_the_users_folders_even_with_a_matching_hash(
    emptied: tuple[Path, dict[str, bytes]], store: Store, tmp_path: Path, name: str
) -> None:
    archive, members = emptied
    card = next(v for n, v in members.items() if n.endswith(".md"))
    bad = _rewrite(archive, tmp_path / "bad.zip", add={name: card}, rehash=True)
    _refused(bad, store.root, "unsafe path|outside this user's folder|not a place|unknown history")
    assert not (tmp_path / "evil.md").exists() and not (store.root.parent / "evil.md").exists()


def test_it_refuses_a_card_of_another_user_placed_in_this_users_folder(
    emptied: tuple[Path, dict[str, bytes]], store: Store, tmp_path: Path
) -> None:
    archive, members = emptied
    name = next(n for n in members if n.endswith(".md") and n.startswith("users/"))
    forged = members[name].replace(f"user_id: {LI}".encode(), f"user_id: {SAM}".encode())
    assert forged != members[name]
    bad = _rewrite(archive, tmp_path / "bad.zip", change={name: forged}, rehash=True)
    _refused(bad, store.root, "another user|belongs at")


def test_it_refuses_history_rows_of_another_user(
    emptied: tuple[Path, dict[str, bytes]], store: Store, tmp_path: Path
) -> None:
    archive, members = emptied
    rows = _jsonl(members["history/turns.jsonl"])
    rows[0]["user_id"] = SAM
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    bad = _rewrite(archive, tmp_path / "bad.zip", change={"history/turns.jsonl": data}, rehash=True)
    _refused(bad, store.root, "a row of another user")


def test_it_refuses_malformed_history_rows(
    emptied: tuple[Path, dict[str, bytes]], store: Store, tmp_path: Path
) -> None:
    archive, members = emptied
    rows = _jsonl(members["history/candidates.jsonl"])
    rows[-1]["verdict"] = "maybe"
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    bad = _rewrite(archive, tmp_path / "bad.zip", change={"history/candidates.jsonl": data}, rehash=True)
    _refused(bad, store.root, r"candidates.jsonl line \d+: verdict")


def test_it_refuses_a_zip_bomb_before_inflating_it(
    emptied: tuple[Path, dict[str, bytes]], store: Store, tmp_path: Path
) -> None:
    archive, _ = emptied
    bomb = b"\0" * (20 * 1024 * 1024)
    bad = _rewrite(archive, tmp_path / "bad.zip", add={"history/usage.jsonl": bomb}, rehash=True)
    _refused(bad, store.root, "zip bomb")


def test_it_bounds_what_an_archive_may_unpack_to(
    emptied: tuple[Path, dict[str, bytes]], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive, _ = emptied
    monkeypatch.setattr(unpack, "MAX_TOTAL_BYTES", 10_000)
    _refused(archive, store.root, "more than 10000 bytes")
    monkeypatch.setattr(unpack, "MAX_MEMBERS", 3)
    _refused(archive, store.root, "at most 3 are accepted")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"not a zip at all", "not a readable zip"),
        (None, "no manifest.json"),
    ],
)
def test_it_refuses_what_is_not_an_export(store: Store, tmp_path: Path, content: bytes | None, match: str) -> None:
    path = tmp_path / "x.zip"
    if content is None:
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("users/alice/memory.json", "{}")
    else:
        path.write_bytes(content)
    with pytest.raises(CommandError, match=f"Refused, nothing changed: {match}"):
        call_command("import", str(path), stdout=io.StringIO())


def test_it_refuses_when_the_archives_run_ids_are_taken_and_can_skip_history(
    emptied: tuple[Path, dict[str, bytes]], store: Store
) -> None:
    archive, members = emptied
    first = _jsonl(members["history/runs.jsonl"])[0]["id"]
    ExtractionRun.objects.create(id=first, user_id="someone-else", agent_name="coder")
    _refused(archive, store.root, "runs id")
    summary = importer.import_archive(archive, actor="test", history=False)
    assert summary.restored["cards"] == FactCard.objects.filter(user_id=LI).count() > 0
    assert not Candidate.objects.filter(user_id=LI).exists()
    call_command("reindex", "--check", stdout=io.StringIO())


# --- commands ---------------------------------------------------------------------


def test_the_export_command_names_the_file_safely_and_refuses_to_overwrite(
    demo: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CommandError, match="Not a valid user id"):  # memory holds nothing about it
        call_command("export", "--user", "../../etc/passwd", stdout=io.StringIO())
    # An id only `ingest` accepts, held by memory: exported, under a safe file name.
    Turn.objects.create(user_id="../../etc/passwd", agent_name="coder", thread_id="t", messages=[])
    call_command("export", "--user", "../../etc/passwd", stdout=io.StringIO())
    made = list(tmp_path.glob("memory-export-*.zip"))
    assert len(made) == 1 and "/" not in made[0].name and ".." not in made[0].name
    out = tmp_path / "li.zip"
    text = io.StringIO()
    call_command("export", "--user", LI, "--out", str(out), stdout=text)
    assert "cards 5" in text.getvalue()
    first = out.read_bytes()
    with pytest.raises(CommandError, match="exists; use --force"):
        call_command("export", "--user", LI, "--out", str(out), stdout=io.StringIO())
    assert out.read_bytes() == first
    call_command("export", "--user", LI, "--out", str(out), "--force", stdout=io.StringIO())
    assert zipfile.ZipFile(out).testzip() is None
    assert not list(tmp_path.glob(".tmp-*"))
    assert AuditEvent.objects.filter(action="export", user_id=LI, actor="manage.py export").count() == 2


@pytest.mark.slow
def test_export_then_import_into_a_fresh_database_and_folder(proc_env: Env, _template_db: str, tmp_path: Path) -> None:
    """The commands of docs/operations.md, as separate processes: demo → export in one installation,
    import into a new database and a new MEMORY_ROOT, `reindex --check` clean, same cards
    and profile (files, mirror rows), and only this user's."""
    proc_env.manage("demo")
    archive = tmp_path / "li.zip"
    proc_env.manage("export", "--user", LI, "--out", str(archive))
    members = _members(archive)
    dump = "from django.core import serializers; from facts.models import FactCard, ProfileSection\n"
    dump += "print(serializers.serialize('json', FactCard.objects.order_by('id')))\n"
    dump += (
        "print(json.dumps(sorted((s.user_id, s.name, s.summary, s.revision) for s in ProfileSection.objects.all())))"
    )
    dump = "import json\n" + dump

    with fresh_env(_template_db, tmp_path / "fresh", tmp_path / "fresh" / "memory") as fresh:
        done = fresh.manage("import", str(archive))
        assert "Restored user 'li.wei@example.com': cards 5" in done.stdout
        assert fresh.check_drift()[0] == 0
        assert _files(fresh.root, "users", "projects") == {
            n: members[n] for n in members if n.startswith(("users/", "projects/"))
        }
        cards_fresh, profile_fresh = fresh.django(dump).splitlines()
        # Rows kept their ids; the next new rows must not collide with them (on
        # PostgreSQL the sequences are moved past the imported ids).
        made = fresh.django(
            "from facts.models import ExtractionRun, Turn, Candidate\n"
            "r = ExtractionRun.objects.create(user_id='n', agent_name='a')\n"
            "t = Turn.objects.create(user_id='n', agent_name='a', thread_id='t', messages=[])\n"
            "c = Candidate.objects.create(run=r, kind='fact', user_id='n', agent_name='a', verdict='accepted')\n"
            "print(r.pk, t.pk, c.pk)"
        )
        for name, pk in zip(("runs", "turns", "candidates"), map(int, made.split()), strict=True):
            assert pk > max(row["id"] for row in _jsonl(members[f"history/{name}.jsonl"]))

    cards_orig, profile_orig = proc_env.django(dump).splitlines()
    original = [c for c in json.loads(cards_orig) if c["fields"]["user_id"] == LI or c["pk"] in members_ids(members)]
    assert json.loads(cards_fresh) == original
    assert json.loads(profile_fresh) == [p for p in json.loads(profile_orig) if p[0] == LI]


def members_ids(members: dict[str, bytes]) -> set[str]:
    return {Path(n).stem for n in members if n.startswith("projects/")}


# --- dashboard --------------------------------------------------------------------


def test_the_export_page_needs_the_admin_role(demo: Store, viewer_client: Client, reviewer_client: Client) -> None:
    url = reverse("export_user") + "?" + "user=" + LI
    for client in (viewer_client, reviewer_client):
        assert client.get(url).status_code == 403
        assert client.post(url).status_code == 403
    assert not AuditEvent.objects.filter(action="export").exists()
    anonymous = Client().get(url)
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]


def test_the_export_button_downloads_the_archive_and_audits_without_content(demo: Store, admin_client_: Client) -> None:
    url = reverse("export_user") + "?user=" + LI.replace("@", "%40")
    page = admin_client_.get(url)
    assert page.status_code == 200
    assert b"Export</button>" in page.content
    shown = dict(re.findall(r"<tr><th>(\w+)</th><td>(\d+)</td></tr>", page.content.decode()))

    response = admin_client_.post(url)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    assert "attachment" in response["Content-Disposition"] and ".zip" in response["Content-Disposition"]
    data = b"".join(response.streaming_content)  # type: ignore[attr-defined]
    members = _members_of_bytes(data)
    assert json.loads(members["manifest.json"])["user_id"] == LI

    event = AuditEvent.objects.get(action="export")
    assert (event.actor, event.user_id) == ("boss", LI)
    # The page said what the archive holds (the export's own audit entry came after).
    assert shown == {k: str(v) for k, v in event.details["counts"].items()}
    assert event.details["counts"]["cards"] == 5 and event.details["counts"]["candidates"] > 0
    logged = json.dumps([event.reason, event.target, event.details], ensure_ascii=False)
    for row in FactCard.objects.filter(user_id=LI):
        assert row.content not in logged and row.id not in logged
    for turn in Turn.objects.filter(user_id=LI):
        assert all(m["content"] not in logged for m in turn.messages if len(m.get("content") or "") > 4)


def _members_of_bytes(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


@pytest.mark.parametrize("bad", ["", "a\x00b", "x" * 201])
def test_the_export_page_refuses_an_invalid_user_id(admin_client_: Client, bad: str) -> None:
    response = admin_client_.get(reverse("export_user"), {"user": bad})
    assert response.status_code == 400
    assert admin_client_.post(reverse("export_user") + "?user=" + bad.replace("\x00", "%00")).status_code == 400
    assert not AuditEvent.objects.filter(action="export").exists()


def test_the_profile_page_links_to_the_export_for_admins_only(
    demo: Store, admin_client_: Client, reviewer_client: Client
) -> None:
    link = (reverse("export_user") + "?user=li.wei%40example.com").encode()
    assert link in admin_client_.get(reverse("profiles"), {"user": LI}).content
    assert link not in reviewer_client.get(reverse("profiles"), {"user": LI}).content
