"""An agent process using `MemoryClient` (no Django in it), for the outbox tests.

    python outbox_agent.py queue URL KEY THREAD N   → sends N turns (thread THREAD, message
        ids THREAD-u0…), printing "queued n" after each send returned; then "ready" and
        waits to be killed
    python outbox_agent.py drain URL KEY            → a fresh client: waits for the turns an
        earlier process left in the outbox to go out; prints {"left": n}

The outbox file is $MEMORY_OUTBOX_PATH.
"""

from __future__ import annotations

import json
import sys
import time

from memoryadmin.client import MemoryClient
from memoryadmin.memory_protocol import MemoryContext
from memoryadmin.outbox import deliver


def queue(url: str, key: str, thread: str, count: int) -> None:
    client = MemoryClient(url, key, timeout=2, deliver_queued_on_start=False)
    ctx = MemoryContext("alice", "coder", None, thread)
    for n in range(count):
        messages = [
            {"id": f"{thread}-u{n}", "role": "user", "content": f"第 {n} 条：我主要做 Python 后端开发。"},
            {"id": f"{thread}-a{n}", "role": "assistant", "content": "好的。"},
        ]
        deliver(client, ctx, messages, flush=False)
        print(f"queued {n}", flush=True)
    print("ready", flush=True)
    time.sleep(600)


def drain(url: str, key: str) -> None:
    client = MemoryClient(url, key, timeout=10)
    if client._starting is not None:
        client._starting.join(timeout=120)
    print(json.dumps({"left": len(client.outbox)}), flush=True)


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "queue":
        queue(args[0], args[1], args[2], int(args[3]))
    else:
        drain(args[0], args[1])
