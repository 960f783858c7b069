"""Backup and restore, as docs/operations.md describes them: a copy of MEMORY_ROOT plus a
`dumpdata` of the database, restored into a fresh database and folder, then `reindex`
→ the same memory, the same history, no drift."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from .helpers_reliability.procs import Env, fresh_env, report_numbers

EXCLUDE = ["contenttypes", "auth.permission", "sessions", "admin.logentry"]
WHOLE_SECOND = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.000(?=Z$|[+-]\d\d:\d\d$)")
DERIVED = shutil.ignore_patterns(".retrieval", ".locks", ".tmp-*")


def _tree(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not any(part in (".retrieval", ".locks") for part in path.relative_to(root).parts)
    }


def _dump(env: Env, target: Path, *labels: str) -> list[dict]:
    args = ["dumpdata", "--natural-foreign", "--natural-primary", "-o", str(target), *labels]
    for label in EXCLUDE if not labels else []:
        args += ["-e", label]
    env.manage(*args)
    rows = json.loads(target.read_text())
    for row in rows:
        # dumpdata keeps milliseconds: a time whose microseconds are under 1,000 is dumped
        # as "…:53.000Z", loaded back as :53 exactly, and dumped again as "…:53Z". The
        # same instant: compared without the empty fraction.
        row["fields"] = {
            name: WHOLE_SECOND.sub(r"\1", value) if isinstance(value, str) else value
            for name, value in row["fields"].items()
        }
        if row["model"] == "facts.profilesection":
            row.pop("pk")  # a derived mirror row: re-created by every rebuild, compared by content
    return sorted(rows, key=lambda r: (r["model"], json.dumps(r.get("pk"), default=str), json.dumps(r["fields"])))


def _seed(env: Env) -> None:
    env.manage("demo")
    env.manage("create_api_key", "backup test agent", "--agents", "coder")


@pytest.mark.slow
def test_a_backup_restores_into_an_identical_installation(proc_env: Env, _template_db: str, tmp_path: Path) -> None:
    _seed(proc_env)
    backup = tmp_path / "backup"
    backup.mkdir()
    original = _dump(proc_env, backup / "db.json")
    shutil.copytree(proc_env.root, backup / "memory", ignore=DERIVED)

    with fresh_env(_template_db, tmp_path / "restored", tmp_path / "restored" / "memory") as restored:
        shutil.copytree(backup / "memory", restored.root, dirs_exist_ok=True)
        restored.manage("loaddata", str(backup / "db.json"))
        restored.manage("reindex", "--no-progress")
        code, report = restored.check_drift()
        assert code == 0, report
        assert report["unreadable"] == []
        assert _tree(restored.root) == _tree(proc_env.root)
        again = _dump(restored, tmp_path / "restored.json")
        # On a difference, name the rows (pytest's list diff shows one truncated row).
        lost = [row for row in original if row not in again]
        gained = [row for row in again if row not in original]
        assert (lost, gained) == ([], []), json.dumps({"lost": lost, "gained": gained}, default=str)[:6000]
        assert again == original
        models = {row["model"] for row in original}
        assert {"facts.factcard", "facts.candidate", "facts.auditevent", "memoryadmin.apikey"} <= models
        report_numbers(
            "backup-restore", rows=len(original), files=len(_tree(proc_env.root)),
            cards=sum(1 for r in original if r["model"] == "facts.factcard"),
        )  # fmt: skip


@pytest.mark.slow
def test_the_files_alone_rebuild_the_same_memory(proc_env: Env, _template_db: str, tmp_path: Path) -> None:
    """The database is lost, the files are not: `reindex` gives back every card and profile."""
    _seed(proc_env)
    mirror = _dump(proc_env, tmp_path / "mirror.json", "facts.factcard", "facts.profilesection")
    with fresh_env(_template_db, tmp_path / "bare", tmp_path / "bare" / "memory") as bare:
        shutil.copytree(proc_env.root, bare.root, ignore=DERIVED, dirs_exist_ok=True)
        bare.manage("reindex", "--no-progress")
        assert bare.check_drift()[0] == 0
        rebuilt = _dump(bare, tmp_path / "rebuilt.json", "facts.factcard", "facts.profilesection")

    assert rebuilt == mirror
