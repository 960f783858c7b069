"""The server `make run` starts keeps answering while 100 idle and 100 half-sent
(slowloris) connections are held open against it.

A real `manage.py serve` process (the command in the Makefile's run recipe) on a free
local port; tests/helpers_reliability/slow_clients.py opens the connections (half of the
half-sent ones stop inside the request head, half send a whole head and then trickle a
body), keeps each request growing every second, and meanwhile times one ordinary
request per second on a fresh connection. gunicorn's threaded worker, which `make run`
used before, answered none of them (docs/operations.md "Web server").
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from .helpers_reliability.procs import Env, report_numbers
from .helpers_reliability.slow_clients import probe

REPO = Path(__file__).resolve().parent.parent
HOLD_SECONDS = float(os.environ.get("SLOW_CLIENTS_SECONDS", "10"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_ready(url: str, server: subprocess.Popen[str], timeout: float = 90) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.poll() is None, f"the server exited with {server.returncode}"
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url + "/login/", timeout=5).status_code == 200:
                return
        time.sleep(0.3)
    raise AssertionError("the server did not answer")


def _stop_group(server: subprocess.Popen[str]) -> None:
    """SIGTERM to the server's process group, SIGKILL if it does not exit."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, sig)
        try:
            server.wait(timeout=30)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.mark.parametrize("proxy", ["", "127.0.0.1"])
def test_the_server_options_are_valid_waitress_settings(settings: Any, proxy: str) -> None:
    from waitress.adjustments import Adjustments

    from memoryadmin.management.commands.serve import web_server_options

    settings.WEB_TRUSTED_PROXY = proxy
    adjustments = Adjustments(**web_server_options())
    assert adjustments.threads == 8 and adjustments.connection_limit == 1000
    assert adjustments.max_request_body_size > settings.API_MAX_BODY_BYTES
    assert adjustments.trusted_proxy == (proxy or None)


def test_make_run_serves_with_the_command_this_test_starts() -> None:
    run_recipe = (REPO / "Makefile").read_text().split("\nrun:", 1)[1].split("\n\n", 1)[0]
    assert "manage.py serve --listen" in run_recipe


@pytest.mark.slow
def test_the_server_keeps_answering_while_slow_clients_hold_connections(proc_env: Env, tmp_path: Path) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = Env(dict(proc_env.vars, DEBUG="0", ALLOWED_HOSTS="127.0.0.1"), proc_env.root)
    log = tmp_path / "server.log"
    with log.open("w") as out:
        server = env.popen(
            "manage.py", "serve", "--listen", f"127.0.0.1:{port}", stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        _wait_ready(url, server)
        result = probe(url, idle=100, half=100, seconds=HOLD_SECONDS, path="/login/", timeout=10)
        still_up = server.poll() is None
    finally:
        _stop_group(server)
    report_numbers("slow-clients", **{k: v for k, v in result.items() if k != "url"})
    assert still_up, log.read_text()
    assert result["failed"] == [], result
    assert result["answered"] >= HOLD_SECONDS * 0.5, result
    # "quickly": an ordinary page in well under a second on a loaded 2-core machine
    assert result["median_ms"] < 500 and result["max_ms"] < 2000, result
