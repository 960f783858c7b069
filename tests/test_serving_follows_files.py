"""Serving always follows the files (issue 34), against a real `manage.py serve` and a
real `manage.py db_worker`, as a curator and an operator use them.

After every step of erase (dashboard and `manage.py erase`), rebuild (dashboard),
correct (dashboard), export and import, hand edit + `reindex`, and restore + `reindex`,
each server's `/context` holds exactly the active cards the files hold and `/search`
finds each of them, and no server or worker holds a deleted SQLite file. A deleted
index is rebuilt off the request path: reads answer right or 503, never an empty 200.
Waiting `memory_remember` calls and idle connections cannot stall other requests.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .helpers_reliability.live import Live
from .helpers_reliability.procs import Env, report_numbers

pytestmark = pytest.mark.slow

FACTS = {
    "alice": ["I prefer concise answers with a minimal example first.", "I prefer answers in English, please."],
    "bob": ["I prefer answers in German, please."],
    "carol": ["I prefer answers in French, please."],
    "dave": ["I prefer tabs over spaces."],
}


@pytest.fixture
def live(proc_env: Env, tmp_path: Path) -> Iterator[Live]:
    running = Live(proc_env, tmp_path)
    try:
        yield running
    finally:
        running.stop_all()
    for log in tmp_path.glob("*.log"):
        text = log.read_text()
        assert "Traceback" not in text and "malformed" not in text, f"{log.name}:\n{text[-3000:]}"


def _warm(live: Live, url: str) -> None:
    """Every server thread opens its own index connection: read on all of them."""
    with live.api(url) as http:
        for user in FACTS:
            for _ in range(4):
                assert http.get("/api/v1/context", params={"user_id": user, "agent_name": "coder"}).status_code == 200
                assert http.get("/api/v1/search", params={"user_id": user, "agent_name": "coder", "q": "answers"})


def test_it_serves_what_the_files_hold_after_erase_rebuild_correct_import_hand_edit_and_restore(
    live: Live, tmp_path: Path
) -> None:
    url = live.serve()
    live.start_worker()
    for user, texts in FACTS.items():
        for text in texts:
            live.remember(url, user, text)
    live.wait_for_the_worker()
    backup = tmp_path / "backup"
    shutil.copytree(live.root / "users", backup / "users")  # `rsync --exclude .retrieval`, as documented
    users = sorted(FACTS)
    _warm(live, url)
    live.assert_serves_the_files(url, users=users)

    # The sequence: a dashboard erasure, "Rebuild from files", a new fact.
    live.erase_in_the_dashboard(url, "bob")
    live.rebuild_in_the_dashboard(url)
    live.remember(url, "alice", "I use Vim as my editor.")
    live.wait_for_the_worker()
    assert len(live.cards("alice")) == 3
    live.assert_serves_the_files(url, users=users)

    # One more correction in the dashboard, then `manage.py erase` in another process.
    fact = live.cards("alice")[0]
    live.correct_in_the_dashboard(url, fact.id, "User prefers short answers with a minimal example first.")
    _warm(live, url)
    live.assert_serves_the_files(url, users=users)
    live.env.manage("erase", "--user", "carol", "--yes")
    live.assert_serves_the_files(url, users=users)

    # Export, erase and import again (separate processes, as an operator runs them).
    archive = tmp_path / "alice.zip"
    live.env.manage("export", "--user", "alice", "--out", str(archive))
    live.env.manage("erase", "--user", "alice", "--yes")
    live.assert_serves_the_files(url, users=users)
    live.env.manage("import", str(archive))
    live.assert_serves_the_files(url, users=users)

    # A hand edit, then `reindex` (by an operator, in another process).
    edited = live.cards("alice")[-1]
    path = next(live.root.rglob(f"{edited.id}.md"))
    path.write_text(path.read_text().replace(edited.content, "User edits with Emacs now."))
    live.env.manage("reindex", "--no-progress")
    live.assert_serves_the_files(url, users=users)

    # A restore from the backup while serving, then `reindex` (docs/operations.md).
    shutil.rmtree(live.root / "users")
    shutil.copytree(backup / "users", live.root / "users")
    live.env.manage("reindex", "--no-progress")
    _warm(live, url)
    live.assert_serves_the_files(url, users=users)
    code, report = live.env.check_drift()
    assert code == 0, report


def test_the_rate_limit_stays_one_across_servers_after_erasures(live: Live) -> None:
    first = live.serve()
    live.start_worker()
    for user in ("carol", "dave"):
        live.remember(first, user, FACTS[user][0])
    live.wait_for_the_worker()
    _warm(live, first)
    live.erase_in_the_dashboard(first, "carol")  # the server's own scrub
    erased = live.env.manage("erase", "--user", "dave", "--yes", "--json")
    assert all("error" not in item for item in json.loads(erased.stdout.splitlines()[-1])["bytes"])
    second = live.serve()
    five = live.env.manage("create_api_key", "five a minute", "--rate-limit", "5").stdout.strip().splitlines()[-1]
    time.sleep(max(0.0, 60.5 - time.time() % 60) if time.time() % 60 > 50 else 0)  # not across a window
    answered = []
    for n in range(10):
        with live.api(first if n % 2 == 0 else second, five) as http:
            params = {"user_id": "dave", "agent_name": "__default__"}
            answered.append(http.get("/api/v1/context", params=params).status_code)
    assert answered.count(200) == 5 and answered.count(429) == 5, answered
    again = live.env.manage("erase", "--user", "alice", "--yes", "--json")
    assert all("error" not in item for item in json.loads(again.stdout.splitlines()[-1])["bytes"])
    assert live.deleted_databases_held() == []


def test_a_deleted_index_is_rebuilt_off_the_request_path_and_never_served_empty(live: Live) -> None:
    seeded = live.env.run(live.env.helper("seed_cards.py"), "5000")
    assert seeded.stdout.strip() == "5000"  # 100 cards a user: a context holds the best 50 (top_n)
    live.env.manage("reindex", "--no-progress")
    url = live.serve(MEMORY_INDEX_WAIT_SECONDS="0.5")
    expected = {f"u{n}": {card.id for card in live.cards(f"u{n}")} for n in range(6)}
    _warm(live, url)
    answers: list[tuple[float, str, int, Any]] = []
    done = threading.Event()

    def agent(user: str) -> None:
        """An agent reading its memory again and again, as the index disappears."""
        with live.api(url) as http:
            while not done.is_set():
                context = http.get("/api/v1/context", params={"user_id": user, "agent_name": "coder"})
                search = http.get("/api/v1/search", params={"user_id": user, "agent_name": "coder", "q": "seed card"})
                for kind, answer in (("context", context), ("search", search)):
                    body = answer.json()
                    answers.append((time.monotonic(), f"{user} {kind}", answer.status_code, body))

    agents = [threading.Thread(target=agent, args=(f"u{n}",)) for n in range(6)]
    for thread in agents:
        thread.start()
    time.sleep(1)
    shutil.rmtree(live.root / ".retrieval")
    deleted = time.monotonic()
    detected = recovered = None
    with live.api(url) as http:
        while recovered is None and time.monotonic() - deleted < 300:
            state = http.get("/api/v1/health")
            if state.status_code == 503:
                assert state.json()["index"]["state"] == "missing", state.text
                detected = detected or time.monotonic() - deleted
            elif detected is not None or time.monotonic() - deleted > 5:
                recovered = time.monotonic() - deleted
            time.sleep(0.02)
    time.sleep(1)
    done.set()
    for thread in agents:
        thread.join(120)
    seen = {"right": 0, "503": 0}
    for _at, what, status, body in answers:
        user, kind = what.split()
        if status == 503:
            assert body["error"]["code"] == "index_unavailable", body
            assert "being rebuilt from the files" in body["error"]["message"]
            seen["503"] += 1
            continue
        assert status == 200, (what, status, body)
        if kind == "context":
            included = set(body["included"])
            assert len(included) == 50 and included <= expected[user], f"{what}: an answer that is not the files"
        else:
            assert body["results"], f"{what}: an empty search while the index was rebuilt"
        seen["right"] += 1
    assert detected is not None and recovered is not None, "the health check never said the index was missing"
    assert live.deleted_databases_held() == []
    report_numbers("deleted-index", cards=5000, detected_s=round(detected, 3), recovered_s=round(recovered, 2), **seen)


def test_waiting_remembers_never_stall_other_requests(live: Live) -> None:
    url = live.serve()  # no worker: it is busy elsewhere, nothing gets judged
    with live.api(url) as http:
        assert http.get("/api/v1/context", params={"user_id": "alice", "agent_name": "__default__"}).status_code == 200
    headers = {
        "Authorization": f"Bearer {live.key}",
        "X-Memory-User": "alice",
        "X-Memory-Agent": "coder",
        "Accept": "application/json, text/event-stream",
    }
    call = {"jsonrpc": "2.0", "id": 0, "method": "tools/call", "params": {"name": "memory_list", "arguments": {}}}
    assert httpx.post(url + "/mcp", json=call, headers=headers, timeout=120).status_code == 200  # SDK loaded
    remembered: list[tuple[float, dict[str, Any]]] = []

    def remember(n: int) -> None:
        started = time.monotonic()
        body = {
            "jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": "memory_remember", "arguments": {"text": f"I prefer tea number {n}."}},
        }  # fmt: skip
        answer = httpx.post(url + "/mcp", json=body, headers=headers, timeout=120)
        remembered.append((time.monotonic() - started, answer.json()["result"]["structuredContent"]))

    calls = [threading.Thread(target=remember, args=(n,)) for n in range(8)]
    for thread in calls:
        thread.start()
    latencies = []
    with live.api(url) as http:
        time.sleep(0.3)
        while any(thread.is_alive() for thread in calls):
            started = time.monotonic()
            answer = http.get("/api/v1/context", params={"user_id": "alice", "agent_name": "__default__"})
            latencies.append(time.monotonic() - started)
            assert answer.status_code == 200, answer.text
            time.sleep(0.1)
    for thread in calls:
        thread.join()
    assert latencies and max(latencies) < 1.5, latencies
    assert len(remembered) == 8 and {r["status"] for _, r in remembered} == {"pending"}
    assert max(seconds for seconds, _ in remembered) < 10
    assert sum("not waiting" in r["message"] for _, r in remembered) >= 6  # two wait, per key
    report_numbers(
        "remembers-waiting",
        remembers=8,
        context_requests=len(latencies),
        context_p50_ms=round(statistics.median(latencies) * 1000, 1),
        context_max_ms=round(max(latencies) * 1000, 1),
        remember_max_s=round(max(seconds for seconds, _ in remembered), 2),
    )


@contextlib.contextmanager
def _idle_connections(port: int, count: int) -> Iterator[list[socket.socket]]:
    held = []
    try:
        for _ in range(count):
            with contextlib.suppress(OSError):
                held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        yield held
    finally:
        for sock in held:
            sock.close()


def _get_from(address: str, port: int, timeout: float = 10) -> tuple[float, str]:
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(address, 0)) as sock:
            sock.sendall(b"GET /api/v1/openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            head = sock.recv(64).decode("latin-1")
    except OSError as exc:
        head = f"{exc.__class__.__name__}"
    return time.monotonic() - started, head.split("\r\n", 1)[0]


def test_one_address_cannot_take_every_connection(live: Live) -> None:
    url = live.serve(WEB_CONNECTION_LIMIT="100", WEB_CONNECTIONS_PER_ADDRESS="50")
    port = int(url.rsplit(":", 1)[1])
    with _idle_connections(port, 150):
        time.sleep(1)
        seconds, status = _get_from("127.0.0.2", port)
    assert status == "HTTP/1.1 200 OK" and seconds < 2, (status, seconds)


def test_a_fifo_in_place_of_a_card_never_hangs_the_worker(live: Live) -> None:
    """ "Check drift now" with a FIFO where a card was (a hung mount stands in the same
    way): the worker finishes the check, names the file, and goes on extracting turns."""
    url = live.serve()
    live.start_worker()
    live.remember(url, "alice", FACTS["alice"][0])
    live.wait_for_the_worker()
    [card] = live.cards("alice")
    path = next(live.root.rglob(f"{card.id}.md"))
    path.unlink()
    os.mkfifo(path)
    with live.curator(url) as web:
        live.post_form(web, "/index/", "/index/check/", {})
    code = (
        "from memoryadmin.models import DriftCheck\n"
        "check = DriftCheck.objects.order_by('-pk').first()\n"
        "print(check.status, [u['path'] + ': ' + u['error'] for u in (check.report or {}).get('unreadable', [])])"
    )
    deadline = time.monotonic() + 120
    while not (said := live.env.django(code).strip().splitlines()[-1]).startswith("done"):
        assert time.monotonic() < deadline, f"the worker did not finish the drift check: {said}"
        time.sleep(0.5)
    assert f"{path.relative_to(live.root)}: not a regular file (a FIFO)" in said
    live.remember(url, "bob", FACTS["bob"][0])
    live.wait_for_the_worker(timeout=120)
    assert len(live.cards("bob")) == 1
