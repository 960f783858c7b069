"""The API's hardening (issue 16) against a real gunicorn, started as `make run` starts it:
chunked bodies on the wire, NaN, NUL, short validation errors, wrong keys throttled
across two worker processes, and a tenant-scoped key.

The test client cannot show the chunked case on its own: Django reads a request without
Content-Length as empty, and only a real server removes the chunk framing.
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

from .helpers_reliability.procs import Env

LIMIT = 100_000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def server(proc_env: Env, tmp_path: Path) -> Iterator[dict[str, Any]]:
    env = Env(
        dict(
            proc_env.vars,
            DEBUG="0",
            ALLOWED_HOSTS="127.0.0.1",
            TASKS_BACKEND="django_tasks_db.DatabaseBackend",  # turns wait for a worker: none runs here
            API_MAX_BODY_BYTES=str(LIMIT),
            API_AUTH_FAILURE_LIMIT="3",
        ),
        proc_env.root,
    )
    key = env.manage("create_api_key", "agent").stdout.strip()
    tenant = env.manage("create_api_key", "acme", "--users", "acme:*").stdout.strip()
    port = _free_port()
    log = tmp_path / "gunicorn.log"
    with log.open("w") as out:
        proc = env.popen(
            "-m", "gunicorn", "memoryadmin.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "2",
            "--threads", "2", "--timeout", "60", stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, log.read_text()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url + "/api/v1/openapi.json", timeout=5).status_code == 200:
                    break
            assert time.monotonic() < deadline, "gunicorn did not answer"
            time.sleep(0.3)
        yield {"env": env, "port": port, "url": url, "key": key, "tenant": tenant, "log": log}
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert "Traceback" not in log.read_text()


def chunked(port: int, key: str, pieces: Iterator[bytes], *, finish: bool = True) -> tuple[int, dict[str, Any]]:
    """POST /api/v1/turns with `Transfer-Encoding: chunked` and no Content-Length, on a raw
    socket (so the test decides when the body ends); returns the status and JSON answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(
            b"POST /api/v1/turns HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + key.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        with contextlib.suppress(ConnectionError):  # the server may answer and close mid-upload
            for piece in pieces:
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            if finish:
                sock.sendall(b"0\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer:
            data = sock.recv(65536)
            assert data, "the server closed without answering"
            answer += data
        head, _, rest = answer.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = int(
            next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        )
        while len(rest) < length:
            rest += sock.recv(65536)
        return status, json.loads(rest[:length])


def turn(user_id: str = "alice", **message: Any) -> dict[str, Any]:
    msg = {"id": "u1", "role": "user", "content": "I mostly write Go.", **message}
    return {"user_id": user_id, "agent_name": "coder", "thread_id": "t1", "messages": [msg]}


def test_it_reads_a_chunked_body_and_refuses_an_oversized_one_before_its_end(server: dict[str, Any]) -> None:
    body = json.dumps(turn()).encode()
    status, answer = chunked(server["port"], server["key"], iter([body[:20], body[20:]]))
    assert (status, answer["accepted"]) == (202, 1)
    # Three times the limit and never finished: the answer comes from what was read so far.
    started = time.monotonic()
    status, answer = chunked(server["port"], server["key"], iter([b"x" * 10_000] * 30), finish=False)
    assert status == 413 and answer["error"]["code"] == "too_large"
    assert time.monotonic() - started < 15


def test_nan_nul_and_a_bad_content_list_over_the_wire(server: dict[str, Any]) -> None:
    http = httpx.Client(base_url=server["url"] + "/api/v1", headers={"Authorization": f"Bearer {server['key']}"})
    headers = {"Content-Type": "application/json"}
    nan = '{"user_id":"alice","agent_name":"coder","thread_id":"t2","messages":[{"id":"n","role":"user",'
    nan += '"content":"hi","additional_kwargs":{"score":NaN}}]}'
    answer = http.post("/turns", content=nan, headers=headers)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith("messages[0].additional_kwargs.score: ")
    bad = turn(content=[1, {"type": "text"}])
    answer = http.post("/turns", json=bad)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == (
        "messages[0].content[0]: Input should be a valid string or a valid dictionary"
    )
    assert http.post("/turns", json=turn(id="m\x002")).status_code == 400
    assert http.post("/turns", json=turn(id="nul", content="I prefer\x00 tea")).status_code == 202
    stored = server["env"].django(
        "import json\nfrom facts.models import Turn\n"
        "print(json.dumps([t.messages for t in Turn.objects.order_by('pk')]))"
    )
    assert '"I prefer tea"' in stored and "\\u0000" not in stored


def test_wrong_keys_are_throttled_across_worker_processes_and_tenant_keys_stay_in_their_tenant(
    server: dict[str, Any],
) -> None:
    url = server["url"] + "/api/v1/context"
    params = {"user_id": "acme:alice", "agent_name": "__default__"}  # no agent is known in a fresh store
    # A new connection per request: gunicorn's two workers share the failure count.
    statuses = [
        httpx.get(url, params=params, headers={"Authorization": f"Bearer mem_guess{i}"}).status_code for i in range(5)
    ]
    assert statuses == [401, 401, 401, 429, 429]
    assert httpx.get(url, params=params, headers={"Authorization": f"Bearer {server['key']}"}).status_code == 200
    tenant = {"Authorization": f"Bearer {server['tenant']}"}
    assert httpx.get(url, params=params, headers=tenant).status_code == 200
    other = httpx.get(url, params={"user_id": "globex:carol", "agent_name": "__default__"}, headers=tenant)
    assert (other.status_code, other.json()["error"]["code"]) == (403, "user_not_allowed")
