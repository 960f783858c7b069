"""`MemoryClient`'s durable outbox: turns sent while the memory service is down wait in
a local SQLite file, go out in order once it is back (from this process or the next),
are bounded, and are safe to send twice. The real-process kill test is
`test_client_outbox_processes.py`."""

from __future__ import annotations

import logging
import random
import sqlite3
import stat
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connections

from facts.models import Turn
from memoryadmin.client import MemoryClient
from memoryadmin.memory_protocol import MemoryContext, MemoryUnavailable
from memoryadmin.models import ApiKey
from memoryadmin.outbox import DurableOutbox, default_outbox_path, deliver
from tests.test_middleware_fakes import DjangoTransport

pytestmark = [pytest.mark.django_db, pytest.mark.urls("memoryadmin.api_root_urls")]

URL = "http://testserver"


class Switchable(httpx.BaseTransport):
    """The memory service that can be taken down: connection refused while `up` is False."""

    def __init__(self) -> None:
        self.up = False
        self.inner = DjangoTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not self.up:
            raise httpx.ConnectError("connection refused", request=request)
        try:
            return self.inner.handle_request(request)
        finally:
            if threading.current_thread() is not threading.main_thread():
                # The client's start-up thread: its database connection ends with it.
                connections.close_all()


@pytest.fixture
def api_key() -> str:
    return ApiKey.issue("agent")[1]


@pytest.fixture
def service() -> Switchable:
    return Switchable()


def client_for(key: str, service: Switchable, **kw: Any) -> MemoryClient:
    return MemoryClient(URL, key, transport=service, deliver_queued_on_start=False, **kw)


def turn(n: int, thread: str = "t1") -> tuple[MemoryContext, list[dict[str, Any]]]:
    ctx = MemoryContext("alice", "coder", None, thread)
    return ctx, [
        {"id": f"{thread}-u{n}", "role": "user", "content": f"第 {n} 条：我主要做 Python 后端开发。"},
        {"id": f"{thread}-a{n}", "role": "assistant", "content": "好的。"},
    ]


def delivered_ids() -> list[str]:
    return [mid for row in Turn.objects.order_by("id") for mid in row.message_ids if "-u" in mid]


# The new client delivers from a thread of its own: no test transaction may hold the database.
@pytest.mark.django_db(transaction=True)
def test_turns_sent_while_down_wait_in_the_file_and_a_new_client_delivers_them_in_order(
    api_key: str, service: Switchable, outbox_path: Path
) -> None:
    first = client_for(api_key, service)
    for n in range(5):
        assert deliver(first, *turn(n), flush=False) is False
    assert len(first.outbox) == 5 and outbox_path.exists()
    del first  # the process is gone; only the file remains

    service.up = True
    second = MemoryClient(URL, api_key, transport=service)  # delivers left-overs on start
    assert second._starting is not None
    second._starting.join(timeout=30)
    assert len(second.outbox) == 0
    assert delivered_ids() == [f"t1-u{n}" for n in range(5)]


def test_a_new_turn_waits_behind_the_queued_ones(api_key: str, service: Switchable) -> None:
    client = client_for(api_key, service)
    for n in range(3):
        deliver(client, *turn(n), flush=False)
    service.up = True
    assert deliver(client, *turn(3), flush=False) is True
    assert delivered_ids() == [f"t1-u{n}" for n in range(4)]
    assert len(client.outbox) == 0


def test_a_redelivered_turn_is_harmless(api_key: str, service: Switchable) -> None:
    service.up = True
    client = client_for(api_key, service)
    assert deliver(client, *turn(0), flush=False) is True
    # A process killed after the server took the turn but before deleting the row sends it again.
    client.outbox.put(*turn(0), flush=False)
    assert client.outbox.retry(client, force=True) == 1
    assert delivered_ids() == ["t1-u0"]
    assert Turn.objects.count() == 1


def test_another_key_or_server_does_not_take_the_rows(api_key: str, service: Switchable, caplog) -> None:
    deliver(client_for(api_key, service), *turn(0), flush=False)
    service.up = True
    other_key = ApiKey.issue("other")[1]
    with caplog.at_level(logging.WARNING):
        other = MemoryClient(URL, other_key, transport=service)
    assert other._starting is None and len(other.outbox) == 0
    assert "1 turns for http://testserver queued under another API key" in caplog.text
    assert Turn.objects.count() == 0
    assert len(client_for(api_key, service).outbox) == 1


def test_the_oldest_turns_are_dropped_beyond_the_count_bound_and_it_is_logged(
    api_key: str, service: Switchable, caplog
) -> None:
    client = client_for(api_key, service, outbox_max_turns=3)
    with caplog.at_level(logging.WARNING):
        for n in range(5):
            deliver(client, *turn(n), flush=False)
    assert len(client.outbox) == 3
    drops = [r.getMessage() for r in caplog.records if "is full" in r.getMessage()]
    assert len(drops) == 2 and all("dropped the 1 oldest undelivered turns" in m for m in drops)
    service.up = True
    client.outbox.retry(client, force=True)
    assert delivered_ids() == ["t1-u2", "t1-u3", "t1-u4"]


def test_the_byte_bound_drops_as_many_old_turns_as_needed(api_key: str, service: Switchable, caplog) -> None:
    client = client_for(api_key, service, outbox_max_bytes=2000)
    for n in range(3):
        deliver(client, *turn(n), flush=False)
    big = [{"id": "big-u", "role": "user", "content": "长" * 500}]
    with caplog.at_level(logging.WARNING):
        deliver(client, MemoryContext("alice", "coder", None, "t1"), big, flush=False)
    assert "dropped the 2 oldest undelivered turns" in caplog.text
    assert len(client.outbox) == 2


def test_a_turn_the_service_refuses_is_dropped_and_the_rest_still_go(api_key: str, service: Switchable, caplog) -> None:
    client = client_for(api_key, service)
    deliver(client, *turn(0), flush=False)
    deliver(
        client, MemoryContext("a/b", "coder", None, "t1"), [{"id": "x", "role": "user", "content": "x"}], flush=False
    )
    deliver(client, *turn(2), flush=False)
    service.up = True
    with caplog.at_level(logging.ERROR):
        assert client.outbox.retry(client, force=True) == 2
    assert "memory refused a queued turn of a/b" in caplog.text
    assert delivered_ids() == ["t1-u0", "t1-u2"]


def test_retry_honours_the_backoff_unless_forced(api_key: str, service: Switchable) -> None:
    client = client_for(api_key, service)
    deliver(client, *turn(0), flush=False)
    service.up = True
    assert client.outbox.retry(client) == 0, "the head's backoff has not passed"
    assert client.outbox.retry(client, force=True) == 1


def test_the_file_is_private_and_lives_in_the_xdg_state_folder(
    api_key: str, service: Switchable, outbox_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    client_for(api_key, service)
    assert stat.S_IMODE(outbox_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(outbox_path.parent.stat().st_mode) == 0o700
    monkeypatch.delenv("MEMORY_OUTBOX_PATH")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_outbox_path() == tmp_path / "state" / "memoryadmin" / "outbox.sqlite3"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_outbox_path() == Path.home() / ".local" / "state" / "memoryadmin" / "outbox.sqlite3"


class FlakyMemory:
    """A memory that fails about a third of its calls while `flaky`, and keeps every
    turn it accepted, in the order it accepted them."""

    def __init__(self, path: Path) -> None:
        self.outbox = DurableOutbox(path, destination="flaky", base_delay=0)
        self.flaky = True
        self.got: list[str] = []
        self._lock = threading.Lock()

    def record_turn(self, ctx: MemoryContext, messages: Sequence[Mapping[str, Any]], *, flush: bool = False) -> dict:
        if self.flaky and random.random() < 0.35:
            raise MemoryUnavailable("flaky")
        with self._lock:
            self.got.append(str(messages[0]["id"]))
        return {"accepted": 1}


def test_two_threads_sharing_the_outbox_deliver_every_turn_once_and_in_their_order(outbox_path: Path) -> None:
    memory = FlakyMemory(outbox_path)

    def agent(name: str) -> None:
        for n in range(40):
            deliver(memory, MemoryContext("alice", "coder", None, name), [{"id": f"{name}-{n}"}], flush=False)  # type: ignore[arg-type]

    threads = [threading.Thread(target=agent, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    memory.flaky = False
    memory.outbox.retry(memory, force=True)  # type: ignore[arg-type]
    assert len(memory.outbox) == 0
    assert sorted(memory.got) == sorted(f"{name}-{n}" for name in "ab" for n in range(40)), "each turn exactly once"
    for name in "ab":
        mine = [m for m in memory.got if m.startswith(name)]
        assert mine == [f"{name}-{n}" for n in range(40)], "each agent's turns in the order it sent them"


def test_an_unusable_outbox_file_never_breaks_the_turn(tmp_path: Path, caplog, monkeypatch: pytest.MonkeyPatch) -> None:
    memory = FlakyMemory(tmp_path / "o.sqlite3")
    memory.flaky = False

    def disk_full(*args: Any, **kwargs: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(memory.outbox, "put", disk_full)
    with caplog.at_level(logging.ERROR):
        assert deliver(memory, MemoryContext("alice", "coder", None, "t"), [{"id": "m"}], flush=False) is True  # type: ignore[arg-type]
    assert memory.got == ["m"] and "sending the turn without it" in caplog.text


def _open_outbox(path: str, barrier: Any) -> None:
    barrier.wait()
    DurableOutbox(path, destination="d")


def test_agents_starting_together_on_a_new_outbox_file_all_open_it(tmp_path: Path) -> None:
    """Several processes creating the same new file at once: switching it to WAL mode
    fails at once in all but one without the retry ("database is locked")."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    for trial in range(15):
        barrier = ctx.Barrier(6)
        path = str(tmp_path / str(trial) / "outbox.sqlite3")
        procs = [ctx.Process(target=_open_outbox, args=(path, barrier)) for _ in range(6)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout=60)
        assert [proc.exitcode for proc in procs] == [0] * 6, f"trial {trial}"
