"""The per-user lock excludes threads of one process too (gunicorn runs 4 per worker)."""

from __future__ import annotations

import threading
import time

from facts.storage.errors import LockTimeout
from facts.storage.store import Bucket, Store


def test_it_excludes_threads_of_one_process(store: Store) -> None:
    events: list[str] = []

    def hold(n: int) -> None:
        with store.lock(Bucket("alice", "coder")):
            events.append(f"in{n}")
            time.sleep(0.2)
            events.append(f"out{n}")

    threads = [threading.Thread(target=hold, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert events in (["in0", "out0", "in1", "out1"], ["in1", "out1", "in0", "out0"])


def test_it_stays_reentrant_within_one_thread(store: Store) -> None:
    with store.lock(Bucket("alice", "coder")), store.lock(Bucket("alice", "writer"), Bucket(project_id="p")):
        pass


def test_a_thread_waiting_too_long_gets_a_lock_timeout(store: Store) -> None:
    short = Store(store.root, lock_timeout=0.1)
    release = threading.Event()
    entered = threading.Event()

    def hold() -> None:
        with store.lock(Bucket("alice", "coder")):
            entered.set()
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    entered.wait(5)
    try:
        raised = False
        try:
            with short.lock(Bucket("alice", "coder")):
                pass
        except LockTimeout:
            raised = True
        assert raised
    finally:
        release.set()
        holder.join()
