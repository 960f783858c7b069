"""Concurrency: live web requests, the worker and rebuilds on the same user at once.

Separate processes on one MEMORY_ROOT and one database, as in production (`make run`):
a gunicorn server (2 workers × 4 threads), an agent client posting turns and flushes
with a Bearer key, two curators incrementing the same card and the same profile
section through the dashboard's login + CSRF forms, a `db_worker` extracting the turns
(the model is a local OpenAI-protocol stub whose answers confirm that very card and
rewrite that very profile), and a loop of full rebuilds. Counters make a lost update
visible: each final count must equal the increments committed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from .helpers_reliability.procs import Env, on_postgres, report_numbers

REQUESTS = int(os.environ.get("CONCURRENCY_WEB_REQUESTS", "16"))
DEADLINE_S = 120 + 6 * REQUESTS  # everything finishes well before this, or it is a deadlock
PROBLEMS = ("database is locked", "Traceback", "Internal Server Error")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_ready(url: str, server: subprocess.Popen[str], timeout: float = 90) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.poll() is None, f"gunicorn exited with {server.returncode}"
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url + "/login/", timeout=5).status_code == 200:
                return
        time.sleep(0.3)
    raise AssertionError("gunicorn did not answer")


def _stats(proc: subprocess.Popen[str], timeout: float, stdin: str | None = None) -> dict[str, Any]:
    out, _ = proc.communicate(stdin, timeout=timeout)
    assert proc.returncode == 0, out
    return json.loads(out.strip().splitlines()[-1])


def _stop(proc: subprocess.Popen[str], *, group: bool = False) -> None:
    """SIGTERM (gunicorn: its whole process group), then SIGKILL if it does not exit."""
    if proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
        try:
            proc.wait(timeout=30)
            return
        except subprocess.TimeoutExpired:
            continue


FINAL_STATE = """
import json
from collections import Counter
from django_tasks_db.models import DBTaskResult
from facts.models import Candidate, ExtractionRun, FactCard
from facts.storage.store import Bucket, get_store
store = get_store()
card = store.read_card(Bucket(user_id="alice", agent_name="coder"), FACT_ID)
profile = store.read_profile("alice")
confirmed = Candidate.objects.filter(kind="confirmation", verdict="accepted", fact_id=FACT_ID).count()
notes = sorted(FactCard.objects.filter(key__startswith="notes_folder_", status="active").values_list("key", flat=True))
print(json.dumps({
    "content": card.content, "confirmation_count": card.confirmation_count, "confirmed": confirmed,
    "work_context": profile.section("workContext").summary, "notes": notes,
    "runs": dict(Counter(ExtractionRun.objects.values_list("status", flat=True))),
    "tasks": dict(Counter(DBTaskResult.objects.values_list("status", flat=True))),
}))
"""


@pytest.mark.slow
def test_web_requests_the_worker_and_rebuilds_at_once_lose_nothing(proc_env: Env, tmp_path: Path) -> None:
    started = time.monotonic()
    client = proc_env.helper("web_client.py")
    # bystander cards of other users make each rebuild long enough to overlap the requests
    proc_env.run(proc_env.helper("seed_cards.py"), "300")
    setup = json.loads(proc_env.run(client, "setup").stdout.strip().splitlines()[-1])
    stub = proc_env.popen(proc_env.helper("model_stub.py"), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert stub.stdout is not None
    model_url = stub.stdout.readline().strip()
    env = Env(
        dict(
            proc_env.vars,
            TASKS_BACKEND="django_tasks_db.DatabaseBackend",
            MEMORY_LLM_BASE_URL=model_url,
            MEMORY_LLM_API_KEY="test-key",
            MEMORY_LLM_MODEL="stub-model",
            MEMORY_LLM_MAX_RETRIES="0",
            MEMORY_LLM_TIMEOUT="30",
            MEMORY_DEBOUNCE_SECONDS="0.3",
            MEMORY_RETRY_BACKOFF_SECONDS="0.5",
            DEBUG="0",
            ALLOWED_HOSTS="127.0.0.1",
            SESSION_COOKIE_SECURE="0",
            CSRF_COOKIE_SECURE="0",
        ),
        proc_env.root,
    )
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    logs = {name: tmp_path / f"{name}.log" for name in ("gunicorn", "worker")}
    stop = tmp_path / "stop"
    procs: list[tuple[subprocess.Popen[str], bool]] = []
    try:
        with logs["gunicorn"].open("w") as out:
            server = env.popen(
                "-m", "gunicorn", "memoryadmin.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "2",
                "--threads", "4", "--timeout", "120", stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        procs.append((server, True))
        with logs["worker"].open("w") as out:
            worker = env.popen(
                "manage.py", "db_worker", "--no-reload", "--no-startup-delay", "--interval", "0.2", "--skip-checks",
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        procs.append((worker, False))
        rebuilder = env.popen(proc_env.helper("concurrent_writer.py"), "reindex", str(stop), stdout=subprocess.PIPE)
        procs.append((rebuilder, False))
        _wait_ready(url, server)
        clients = [
            env.popen(client, "api", url, setup["api_key"], str(REQUESTS), "a", stdout=subprocess.PIPE),
            env.popen(client, "dashboard", url, setup["fact_id"], str(REQUESTS), stdout=subprocess.PIPE),
            env.popen(client, "dashboard", url, setup["fact_id"], str(REQUESTS), stdout=subprocess.PIPE),
        ]
        procs += [(c, False) for c in clients]
        budget = DEADLINE_S - (time.monotonic() - started)
        agent, *curators = [_stats(c, timeout=max(budget, 10)) for c in clients]
        waited = json.loads(env.run(client, "wait", "60", timeout=120).stdout.strip().splitlines()[-1])
        stop.touch()
        rebuild = _stats(rebuilder, timeout=120)
        _stop(worker)
        _stop(server, group=True)
        model = _stats(stub, timeout=30, stdin="")  # its stdin closed: it stops
    finally:
        for proc, group in procs:
            _stop(proc, group=group)
        if stub.poll() is None:
            stub.kill()
            stub.wait(timeout=30)
    final = json.loads(env.django(FINAL_STATE.replace("FACT_ID", repr(setup["fact_id"]))).strip().splitlines()[-1])
    log_text = {name: path.read_text(errors="replace") for name, path in logs.items()}
    seen = {(name, p): text.count(p) for name, text in log_text.items() for p in PROBLEMS}
    everyone = [agent, *curators]
    total = {k: sum(s[k] for s in everyone) for k in ("attempted", "committed", "retried", "http_5xx", "db_locked")}
    total["db_locked"] += sum(n for (_, p), n in seen.items() if p == "database is locked") + rebuild["db_locked"]
    card_increments = sum(c["fact_committed"] for c in curators)
    profile_increments = sum(c["profile_committed"] for c in curators)
    report_numbers(
        "concurrency-web+worker+rebuild", database="postgresql" if on_postgres() else "sqlite", requests=REQUESTS,
        **total,
        conflicts=sum(c["conflicts"] for c in curators), card_conflicts=sum(c["fact_conflicts"] for c in curators),
        profile_conflicts=sum(c["profile_conflicts"] for c in curators), turns=agent["committed"], context_reads=agent["reads"],
        card_increments=card_increments, profile_increments=profile_increments,
        worker_confirmations=final["confirmed"], extraction_runs=final["runs"], model_requests=model["requests"],
        rebuilds=rebuild["committed"], seconds=round(time.monotonic() - started, 1),
    )  # fmt: skip
    for name, stats in (("agent", agent), ("curator 1", curators[0]), ("curator 2", curators[1])):
        assert stats["errors"] == [], (name, stats["errors"][:10])
    assert total["http_5xx"] == 0, "no request may fail with a server error"
    assert total["db_locked"] == 0, f"'database is locked' must never reach a caller or a log: {seen}"
    assert not any(seen.values()), {k: v for k, v in seen.items() if v}
    assert total["committed"] == total["attempted"] == 3 * REQUESTS
    assert rebuild["errors"] == [] and rebuild["committed"] >= 1, rebuild
    # no lost update: every committed increment is in the files
    assert final["content"] == f"Web counter: {card_increments}", final["content"]
    assert final["work_context"] == f"Web counter: {profile_increments}", final["work_context"]
    assert final["confirmation_count"] == final["confirmed"] > 0, final
    # every accepted turn was processed, once, and its fact stored
    assert not waited["waited_out"], f"turns left unprocessed: {waited['turns']}"
    assert set(waited["turns"]) <= {"done", "skipped"}, waited["turns"]
    assert final["notes"] == sorted(f"notes_folder_{tag}" for tag in agent["tags"])
    assert set(final["runs"]) == {"succeeded"}, final["runs"]
    assert set(final["tasks"]) == {"SUCCESSFUL"}, final["tasks"]
    code, report = proc_env.check_drift()
    assert code == 0, f"mirror or index left behind the files: {report}"
