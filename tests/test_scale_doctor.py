"""`doctor` refuses a shared file root whose locks would not hold across machines, and a
search index that is not machine-local (issue 24)."""

from __future__ import annotations

import contextlib
import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from memoryadmin import sharedroot

pytestmark = pytest.mark.django_db

MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:50 / /srv/memory rw,relatime shared:30 - {fstype} server:/memory rw,{options}
"""


def _mount(fstype: str, options: str) -> sharedroot.Mount:
    mount = sharedroot.mount_of(Path("/srv/memory/users"), MOUNTINFO.format(fstype=fstype, options=options))
    assert mount is not None and mount.point == "/srv/memory"
    return mount


@pytest.mark.parametrize(
    ("fstype", "options", "level"),
    [
        ("nfs4", "vers=4.1,hard,proto=tcp,local_lock=none", None),  # EFS, NFSv4.1
        ("ceph", "name=memory,acl", None),
        ("nfs4", "vers=4.2,local_lock=flock", "fail"),
        ("nfs", "vers=3,nolock", "fail"),
        ("nfs", "vers=3,local_lock=none", "warn"),
        ("cifs", "vers=3.0", "fail"),
        ("fuse.sshfs", "user_id=0", "fail"),
    ],
)
def test_it_judges_the_locking_of_each_shared_file_system(fstype: str, options: str, level: str | None) -> None:
    problem = sharedroot.lock_problem(_mount(fstype, options))
    assert (problem[0] if problem else None) == level


def _machines() -> list[dict[str, Any]]:
    out = StringIO()
    with contextlib.suppress(CommandError):  # other checks may fail in a test setup
        call_command("doctor", "--json", "--skip", "model", stdout=out, stderr=StringIO())
    return [f for f in json.loads(out.getvalue())["findings"] if f["check"] == "machines"]


def test_it_passes_a_local_root_with_working_locks(memory_root: Path, settings: Any, tmp_path: Path) -> None:
    settings.MEMORY_INDEX_DIR = str(tmp_path / "local-index")
    findings = _machines()
    assert [f["level"] for f in findings] == ["ok"], findings
    assert "flock enforced" in findings[0]["message"]


def test_it_fails_a_root_mounted_with_client_only_locks(
    memory_root: Path, settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.MEMORY_INDEX_DIR = str(tmp_path / "local-index")
    nfs = sharedroot.Mount(str(memory_root), "nfs4", ("rw", "vers=4.2", "local_lock=flock"))
    real = sharedroot.mount_of
    monkeypatch.setattr(
        sharedroot, "mount_of", lambda path, info=None: nfs if str(path).startswith(str(memory_root)) else real(path)
    )
    findings = _machines()
    assert [f["level"] for f in findings] == ["fail"]
    assert "local_lock=flock" in findings[0]["message"]


def test_it_fails_an_index_on_the_shared_root(
    memory_root: Path, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.MEMORY_INDEX_DIR = ""  # the default: MEMORY_ROOT/.retrieval
    nfs = sharedroot.Mount(str(memory_root), "nfs4", ("rw", "vers=4.1", "local_lock=none"))
    monkeypatch.setattr(sharedroot, "mount_of", lambda path, info=None: nfs)
    findings = _machines()
    assert [f["level"] for f in findings] == ["fail"]
    assert "not machine-local" in findings[0]["message"] and "MEMORY_INDEX_DIR" in findings[0]["message"]


def test_it_finds_that_flock_refuses_a_second_holder(tmp_path: Path) -> None:
    assert sharedroot.flock_enforced(tmp_path / ".locks")


def test_it_warns_about_a_local_index_others_can_read(memory_root: Path, settings: Any, tmp_path: Path) -> None:
    (tmp_path / "local-index").mkdir(mode=0o755)
    (tmp_path / "local-index").chmod(0o755)
    settings.MEMORY_INDEX_DIR = str(tmp_path / "local-index")
    findings = _machines()
    assert [f["level"] for f in findings] == ["warn"]
    assert "o-rwx" in findings[0]["message"]


def test_it_passes_one_machine_with_the_default_index_on_a_local_disk(memory_root: Path, settings: Any) -> None:
    """A single PostgreSQL (or SQLite) install keeps its index under MEMORY_ROOT: fine
    while that root is a local disk (several machines would share it over the network)."""
    settings.MEMORY_INDEX_DIR = ""
    findings = _machines()
    assert [f["level"] for f in findings] == ["ok"], findings
