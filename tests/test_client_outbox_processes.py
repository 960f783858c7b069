"""The durable outbox with real processes: an agent process queues turns while the
memory service is down and is SIGKILLed; a new agent process delivers them, in order and
once, when the service is back (a real gunicorn serving the API). Two processes sharing
one outbox file deliver every turn exactly once (a counting stub server)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from .helpers_reliability.procs import Env, report_numbers
from .test_concurrency_web import _free_port, _stop, _wait_ready

TURNS = 12


def _agent_env(proc_env: Env, outbox: Path) -> Env:
    return Env(dict(proc_env.vars, MEMORY_OUTBOX_PATH=str(outbox)), proc_env.root)


def _queue(env: Env, url: str, key: str, thread: str, count: int) -> subprocess.Popen[str]:
    return env.popen(env.helper("outbox_agent.py"), "queue", url, key, thread, str(count), stdout=subprocess.PIPE)


def _acked(proc: subprocess.Popen[str], stop_after: int | None = None) -> int:
    """Reads the agent's acks until "ready" (or `stop_after` acks); returns their count."""
    assert proc.stdout is not None
    acked = 0
    for line in proc.stdout:
        if line.startswith("queued"):
            acked += 1
            if stop_after is not None and acked >= stop_after:
                break
        elif line.startswith("ready"):
            break
    return acked


def test_turns_queued_by_a_killed_agent_are_delivered_in_order_by_the_next_one(proc_env: Env, tmp_path: Path) -> None:
    key = proc_env.django("from memoryadmin.models import ApiKey; print(ApiKey.issue('outbox')[1])").strip()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = _agent_env(proc_env, tmp_path / "agent" / "outbox.sqlite3")

    # The service is down (nothing listens on the port): the agent queues, then is killed
    # at a random moment after some acknowledged sends (or once all are queued).
    kill_after = random.randint(3, TURNS)
    agent = _queue(env, url, key, "t1", TURNS)
    acked = _acked(agent, stop_after=kill_after)
    agent.send_signal(signal.SIGKILL)
    agent.wait(timeout=30)
    assert acked == kill_after

    server_env = Env(dict(proc_env.vars, TASKS_BACKEND="django_tasks_db.DatabaseBackend", DEBUG="0",
                          ALLOWED_HOSTS="127.0.0.1"), proc_env.root)  # fmt: skip
    log = (tmp_path / "gunicorn.log").open("w")
    server = server_env.popen(
        "-m", "gunicorn", "memoryadmin.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "1", "--threads", "2",
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_ready(url, server)
        started = time.monotonic()
        done = env.run(env.helper("outbox_agent.py"), "drain", url, key, timeout=180)
        seconds = time.monotonic() - started
        assert json.loads(done.stdout.strip().splitlines()[-1]) == {"left": 0}
        # Sending the same turns again (as a client killed between the server's answer
        # and the row's deletion would) changes nothing on the server.
        again = _queue(env, url, key, "t1", acked)
        assert _acked(again) == acked
        _stop(again)
    finally:
        _stop(server, group=True)
        log.close()
    rows = json.loads(
        proc_env.django(
            "import json; from facts.models import Turn\n"
            "print(json.dumps([[m for m in t.message_ids if '-u' in m] for t in Turn.objects.order_by('id')]))"
        ).strip()
    )
    delivered = [mid for row in rows for mid in row]
    # Every acknowledged turn arrived, once, in the order it was sent; a send in flight
    # at the kill (queued, not yet acknowledged) may have arrived too.
    assert delivered[:acked] == [f"t1-u{n}" for n in range(acked)]
    assert delivered == [f"t1-u{n}" for n in range(len(delivered))]
    assert len(delivered) <= acked + 1
    assert all(rows), "the redelivered turns created no empty turns"
    report_numbers("client_outbox_kill", sent=TURNS, killed_after=acked, delivered=len(delivered),
                   redelivered_new=len(delivered) - acked, drain_seconds=round(seconds, 2))  # fmt: skip


class _Counting(BaseHTTPRequestHandler):
    posts: list[str] = []
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        time.sleep(0.005)  # long enough for two deliverers to overlap if they could
        with self.lock:
            self.posts.extend(m["id"] for m in body["messages"] if "-u" in m["id"])
        payload = json.dumps({"accepted": len(body["messages"]), "turn_ids": []}).encode()
        self.send_response(202)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def counting_stub() -> Iterator[tuple[int, list[str], Any]]:
    port = _free_port()
    _Counting.posts = []
    servers: list[ThreadingHTTPServer] = []

    def start() -> None:
        server = ThreadingHTTPServer(("127.0.0.1", port), _Counting)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)

    yield port, _Counting.posts, start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_two_processes_sharing_the_outbox_deliver_every_turn_once(
    proc_env: Env, tmp_path: Path, counting_stub: tuple[int, list[str], Any]
) -> None:
    port, posts, start = counting_stub
    url = f"http://127.0.0.1:{port}"
    env = _agent_env(proc_env, tmp_path / "agent" / "outbox.sqlite3")
    agents = [_queue(env, url, "mem_shared", thread, 25) for thread in ("a", "b")]
    try:
        assert [_acked(agent) for agent in agents] == [25, 25]
    finally:
        for agent in agents:
            agent.send_signal(signal.SIGKILL)
            agent.wait(timeout=30)
    start()
    drains = [env.popen(env.helper("outbox_agent.py"), "drain", url, "mem_shared", stdout=subprocess.PIPE)
              for _ in range(2)]  # fmt: skip
    lefts = [json.loads(d.communicate(timeout=180)[0].strip().splitlines()[-1])["left"] for d in drains]
    assert lefts == [0, 0]
    assert sorted(posts) == sorted(f"{t}-u{n}" for t in "ab" for n in range(25)), "every turn exactly once"
    for thread in "ab":
        assert [p for p in posts if p.startswith(thread)] == [f"{thread}-u{n}" for n in range(25)]
    report_numbers("client_outbox_two_processes", queued=50, posted=len(posts))
