"""A migrated database that separate processes can share, and helpers to run them.

SQLite: one migrated template file per session, copied for each test.
PostgreSQL (when ``DATABASE_URL`` points at one): a template database per session,
cloned with ``CREATE DATABASE … TEMPLATE`` for each test and dropped afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
HELPERS = Path(__file__).resolve().parent


def _base_url() -> str:
    return os.environ.get("DATABASE_URL", "")


def on_postgres() -> bool:
    return _base_url().startswith(("postgres://", "postgresql://"))


def _pg_admin(sql: str) -> None:
    import psycopg

    url = _base_url().rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)


def _pg_url(name: str) -> str:
    return _base_url().rsplit("/", 1)[0] + "/" + name


@dataclass
class Env:
    """Environment of the processes of one test: its own DB and MEMORY_ROOT."""

    vars: dict[str, str]
    root: Path

    def run(self, *args: str, timeout: float = 180, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args],
            cwd=REPO,
            env=self.vars,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )

    def manage(self, *args: str, timeout: float = 180, check: bool = True) -> subprocess.CompletedProcess[str]:
        # System checks import every URLconf; the harness only needs the commands.
        return self.run("manage.py", *args, "--skip-checks", timeout=timeout, check=check)

    def django(self, code: str, timeout: float = 120) -> str:
        """Run `code` in a fresh process with Django set up; returns its stdout."""
        setup = "import django; django.setup()\n"
        return self.run("-c", setup + code, timeout=timeout).stdout

    def popen(self, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, *args], cwd=REPO, env=self.vars, text=True, **kwargs)

    def helper(self, name: str) -> str:
        return str(HELPERS / name)

    def check_drift(self) -> tuple[int, dict[str, Any]]:
        done = self.manage("reindex", "--check", "--json", check=False)
        return done.returncode, json.loads(done.stdout or "{}")


class Checker:
    """`reindex --check` on demand, from one long-lived process."""

    def __init__(self, env: Env) -> None:
        self.proc = env.popen(env.helper("checker.py"), stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def __call__(self) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("check\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _env_vars(db_url: str, root: Path, var: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "memoryadmin.settings",
            "DATABASE_URL": db_url,
            "MEMORY_ROOT": str(root),
            "VAR_DIR": str(var),
            "TASKS_BACKEND": "django_tasks.backends.immediate.ImmediateBackend",
            "PYTHONPATH": str(REPO),
            "LOG_LEVEL": "WARNING",
        }
    )
    return env


@pytest.fixture(scope="session")
def _template_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("reltemplate")
    if on_postgres():
        name = f"rel_template_{uuid.uuid4().hex[:8]}"
        _pg_admin(f'CREATE DATABASE "{name}"')
        url = _pg_url(name)
    else:
        url = f"sqlite:///{base / 'template.sqlite3'}"
    env = _env_vars(url, base / "memory", base / "var")
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0", "--noinput", "--skip-checks"],
        cwd=REPO,
        env=env,
        check=True,
        timeout=300,
    )
    yield url
    if on_postgres():
        _pg_admin(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}"')


@contextlib.contextmanager
def fresh_env(template_url: str, folder: Path, root: Path) -> Iterator[Env]:
    """A new migrated database (a copy of the template) and `root` as MEMORY_ROOT."""
    folder.mkdir(parents=True, exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    if on_postgres():
        name = f"rel_{uuid.uuid4().hex[:10]}"
        _pg_admin(f'CREATE DATABASE "{name}" TEMPLATE "{template_url.rsplit("/", 1)[1]}"')
        url = _pg_url(name)
    else:
        db = folder / "shared.sqlite3"
        shutil.copy(template_url.removeprefix("sqlite:///"), db)
        url = f"sqlite:///{db}"
    try:
        yield Env(_env_vars(url, root, folder / "var"), root)
    finally:
        if on_postgres():
            _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def proc_env(_template_db: str, tmp_path: Path, memory_root: Path) -> Iterator[Env]:
    """A migrated database and the test's MEMORY_ROOT, for subprocesses."""
    with fresh_env(_template_db, tmp_path, memory_root) as env:
        yield env


def report_numbers(scenario: str, **numbers: Any) -> None:
    """Print the figures of a run (`pytest -s` shows them) and append them to
    ``$RELIABILITY_LOG`` when set, which is where RELIABILITY.md's numbers come from."""
    line = json.dumps({"scenario": scenario, **numbers})
    print(line)
    target = os.environ.get("RELIABILITY_LOG")
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
