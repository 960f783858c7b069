"""Two app "machines" on one PostgreSQL and one shared file root (issue 24).

Each machine is a gunicorn and a `db_worker` with its own port, its own VAR_DIR and its
own local index directory (MEMORY_INDEX_DIR); they share only the database and
MEMORY_ROOT. A card written on A is found by search on B within a second (B's worker
follows the change log), turns posted to either machine are each run once, and A killed
in the middle of writes leaves B serving and the index check clean.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .helpers_reliability.procs import Env, on_postgres, report_numbers

pytestmark = pytest.mark.skipif(not on_postgres(), reason="several machines need PostgreSQL (DATABASE_URL)")

TURNS = 12
FOLLOW_DEADLINE_S = 1.0

STATE = """
import json
from collections import Counter
from facts.models import ExtractedMessage, ExtractionRun, Turn
print(json.dumps({
    "turns": dict(Counter(Turn.objects.values_list("status", flat=True))),
    "runs": dict(Counter(ExtractionRun.objects.values_list("status", flat=True))),
    "run_threads": dict(Counter(ExtractionRun.objects.values_list("thread_id", flat=True))),
    "extracted": dict(Counter(ExtractedMessage.objects.values_list("message_id", flat=True))),
}))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Machine:
    def __init__(self, name: str, shared: Env, tmp_path: Path) -> None:
        local = tmp_path / f"machine-{name}"
        (local / "var").mkdir(parents=True)
        self.name = name
        self.env = Env(
            dict(
                shared.vars,
                VAR_DIR=str(local / "var"),
                MEMORY_INDEX_DIR=str(local / "index"),
                DEBUG="0",
                ALLOWED_HOSTS="127.0.0.1",
                TASKS_BACKEND="django_tasks_db.DatabaseBackend",
                MEMORY_EXTRACTOR="rules",
                MEMORY_DEBOUNCE_SECONDS="0.2",
                MEMORY_CLAIM_LEASE_SECONDS="5",
            ),
            shared.root,
        )
        self.log = local / "procs.log"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[str]] = []

    def start(self) -> None:
        with self.log.open("a") as out:
            self.procs.append(
                self.env.popen(
                    "-m",
                    "gunicorn",
                    "memoryadmin.wsgi",
                    "--bind",
                    f"127.0.0.1:{self.port}",
                    "--workers",
                    "1",
                    "--threads",
                    "4",
                    "--timeout",
                    "60",
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            self.procs.append(
                self.env.popen(
                    "manage.py",
                    "db_worker",
                    "--no-reload",
                    "--no-startup-delay",
                    "--interval",
                    "0.1",
                    "--skip-checks",
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + 90
        while True:
            assert all(proc.poll() is None for proc in self.procs), self.log.read_text()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(self.url + "/api/v1/openapi.json", timeout=5).status_code == 200:
                    return
            assert time.monotonic() < deadline, f"machine {self.name} did not answer"
            time.sleep(0.3)

    def kill(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        self.procs = []

    def search(self, key: str, q: str) -> list[dict[str, Any]]:
        response = httpx.get(
            self.url + "/api/v1/search",
            params={"user_id": "alice", "agent_name": "coder", "q": q, "limit": 10},
            headers={"Authorization": f"Bearer {key}"},
            timeout=10,
        )
        assert response.status_code == 200, response.text
        return response.json()["results"]


@pytest.fixture
def machines(proc_env: Env, tmp_path: Path) -> Iterator[tuple[Machine, Machine]]:
    a, b = Machine("a", proc_env, tmp_path), Machine("b", proc_env, tmp_path)
    try:
        a.start()
        b.start()
        yield a, b
    finally:
        a.kill()
        b.kill()


def _found(results: list[dict[str, Any]], word: str) -> bool:
    return any(word in result.get("content", "") for result in results)


def test_it_serves_one_memory_from_two_machines(machines: tuple[Machine, Machine], tmp_path: Path) -> None:
    a, b = machines
    # A key for the agent: it is known before its first card (an unknown agent is a 404).
    key = a.env.manage("create_api_key", "agent", "--agents", "coder", "--rate-limit", "0").stdout.strip()
    assert b.search(key, "anything") == []

    # 1. A card written on A is found by search on B within a second.
    writer = a.env.popen(
        a.env.helper("scale_writer.py"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
    )
    assert writer.stdin is not None and writer.stdout is not None
    lags = []
    try:
        for word in ("zanzibar", "quixotic", "marmalade", "tangerine", "obsidian"):
            writer.stdin.write(f"one {word}\n")
            writer.stdin.flush()
            assert writer.stdout.readline().strip() == f"ok {word}"
            written = time.monotonic()
            while not _found(b.search(key, word), word):
                assert time.monotonic() - written < 5, f"{word} never reached machine B"
                time.sleep(0.02)
            lags.append(time.monotonic() - written)
        assert max(lags) < FOLLOW_DEADLINE_S, lags

        # 2. Turns posted to either machine are each run exactly once, by either worker.
        for n in range(TURNS):
            machine = (a, b)[n % 2]
            body = {
                "user_id": "alice",
                "agent_name": "coder",
                "thread_id": f"t{n}",
                "messages": [
                    {"id": f"m{n}", "role": "user", "content": f"I prefer tabs over spaces, note {n}."},
                    {"id": f"r{n}", "role": "assistant", "content": "Noted."},
                ],
            }
            response = httpx.post(
                machine.url + "/api/v1/flush", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=10
            )
            assert response.status_code == 202, response.text
        deadline = time.monotonic() + 120
        while True:
            state = json.loads(a.env.django(STATE).strip().splitlines()[-1])
            if state["turns"] == {"done": TURNS} or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert state["turns"] == {"done": TURNS}, state
        each_once = {f"{side}{n}": 1 for n in range(TURNS) for side in "mr"}
        assert state["extracted"] == each_once, "a turn was run twice"
        assert all(count == 1 for count in state["run_threads"].values()), state["run_threads"]

        # 3. A killed in the middle of writes: B keeps serving, and the check is clean.
        writer.stdin.write("burst\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "burst"
        time.sleep(1.5)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
    a.kill()
    assert _found(b.search(key, "zanzibar"), "zanzibar")
    time.sleep(1.0)  # B's follower takes in A's last acknowledged writes
    code, report = b.env.check_drift()
    recovered = False
    if code != 0:
        # A write killed between its files and its mirror row: the documented recovery
        # (docs/scaling.md) is one `reindex` on any machine, then a check on each.
        b.env.manage("reindex", "--no-progress")
        code, report = b.env.check_drift()
        recovered = True
    assert code == 0, report
    assert b.search(key, "burst")
    report_numbers(
        "two-machines", follow_lag_ms=[round(lag * 1000) for lag in lags], turns=TURNS,
        check_needed_reindex=recovered,
    )  # fmt: skip
