"""A worker killed with SIGKILL strands no turn (issue 16, point 1).

Separate processes, as `make run` runs them: 30 turns are posted (each its own thread, so
each is one model call), a real `manage.py db_worker` extracts them through a local
OpenAI-protocol stub and is SIGKILLed while a model call is in flight, with its turn
claimed; a new worker is started. The dead worker's claim lapses after the (short) lease,
the new worker's sweep hands the turn back to the queue and extracts it: every turn ends
`done` with exactly one card, and no extraction run is left `running`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .helpers_reliability.procs import Env, on_postgres, report_numbers

TURNS = 30
KILL_AT_CALL = 5  # SIGKILL while the 5th model call is in flight (after 4 answered)
LEASE_SECONDS = 3
DEADLINE_S = float(os.environ.get("WORKER_KILL_DEADLINE", "240"))

SEND = """
from facts.intake.queue import record_turn
for n in range(TURNS):
    tag = f"n{n}"
    record_turn(user_id="alice", agent_name="coder", thread_id=f"t{n}", messages=[
        {"id": f"m{n}", "role": "user", "content": f"Note {tag}: I keep my notes in folder {tag}. I confirm the web counter."},
        {"id": f"r{n}", "role": "assistant", "content": "Noted."},
    ])
"""

STATE = """
import json
from collections import Counter
from django_tasks_db.models import DBTaskResult
from facts.models import ExtractedMessage, ExtractionRun, FactCard, Turn
print(json.dumps({
    "jobs": dict(Counter(DBTaskResult.objects.values_list("status", flat=True))),
    "turns": dict(Counter(Turn.objects.values_list("status", flat=True))),
    "runs": dict(Counter(ExtractionRun.objects.values_list("status", flat=True))),
    "cards": dict(Counter(FactCard.objects.filter(key__startswith="notes_folder_").values_list("key", flat=True))),
    "extracted": dict(Counter(ExtractedMessage.objects.filter(message_id__startswith="m").values_list("message_id", flat=True))),
}))
"""


def _worker(env: Env, log: Path) -> subprocess.Popen[str]:
    with log.open("a") as out:
        return env.popen(
            "manage.py", "db_worker", "--no-reload", "--no-startup-delay", "--interval", "0.2", "--skip-checks",
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def _state(env: Env) -> dict:
    return json.loads(env.django(STATE).strip().splitlines()[-1])


@pytest.mark.slow
def test_a_worker_killed_mid_run_strands_no_turn(proc_env: Env, tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    calls.write_text("0")
    stub = proc_env.popen(
        proc_env.helper("slow_model_stub.py"), str(calls), "0.5", stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert stub.stdout is not None
    env = Env(
        dict(
            proc_env.vars,
            TASKS_BACKEND="django_tasks_db.DatabaseBackend",
            MEMORY_LLM_BASE_URL=stub.stdout.readline().strip(),
            MEMORY_LLM_API_KEY="test-key",
            MEMORY_LLM_MODEL="stub-model",
            MEMORY_LLM_MAX_RETRIES="0",
            MEMORY_LLM_TIMEOUT="30",
            MEMORY_DEBOUNCE_SECONDS="0.2",
            MEMORY_CLAIM_LEASE_SECONDS=str(LEASE_SECONDS),
        ),
        proc_env.root,
    )
    log = tmp_path / "worker.log"
    workers: list[subprocess.Popen[str]] = []
    try:
        env.django(SEND.replace("TURNS", str(TURNS)))
        first = _worker(env, log)
        workers.append(first)
        deadline = time.monotonic() + 120
        while int(calls.read_text() or 0) < KILL_AT_CALL:
            assert first.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        killed_at = time.monotonic()
        stranded = _state(env)
        # the kill really left a claimed turn and a running run behind
        assert stranded["turns"].get("processing") == 1, stranded
        assert stranded["runs"].get("running") == 1, stranded

        workers.append(_worker(env, log))
        while True:
            state = _state(env)
            if state["turns"] == {"done": TURNS} or time.monotonic() - killed_at > DEADLINE_S:
                break
            time.sleep(1)
        recovered_s = time.monotonic() - killed_at
    finally:
        for worker in workers:
            with contextlib.suppress(ProcessLookupError):
                worker.kill()
            worker.wait(timeout=30)
        model = json.loads(stub.communicate("", timeout=30)[0].strip().splitlines()[-1])
    report_numbers(
        "worker-kill", database="postgresql" if on_postgres() else "sqlite", turns=TURNS, lease_s=LEASE_SECONDS,
        killed_at_call=KILL_AT_CALL, recovered_s=round(recovered_s, 1), model_requests=model["requests"],
        runs=state["runs"], jobs=state["jobs"],
    )  # fmt: skip
    assert state["turns"] == {"done": TURNS}, f"turns not done {recovered_s:.0f} s after the kill: {state['turns']}"
    assert state["cards"] == {f"notes_folder_n{n}": 1 for n in range(TURNS)}, "exactly one card per turn"
    assert state["extracted"] == {f"m{n}": 1 for n in range(TURNS)}
    # the dead worker's run is closed as failed, none is left running
    assert state["runs"] == {"succeeded": TURNS, "failed": 1}, state["runs"]
    # and its job row too (django-tasks-db would show it RUNNING for good)
    assert "RUNNING" not in state["jobs"] and state["jobs"].get("FAILED") == 1, state["jobs"]
    assert recovered_s < DEADLINE_S
