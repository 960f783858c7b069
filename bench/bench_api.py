"""Agents' API under a short, bounded load on 127.0.0.1.

    .venv/bin/python bench/bench_api.py [--seconds 15] [--concurrency 8] [--workers 2]

Starts gunicorn (2 workers × 4 threads, the multi-process recipe; `make run` serves with waitress) on a free port against a
throwaway copy of the 100,000-card corpus (bench/corpus.py): a copy of its database
and of its search index, in a temporary MEMORY_ROOT whose card folders link to the
corpus's (read only: no extraction worker runs, so nothing writes cards). Then, each
phase bounded by time *and* request count:

- ``POST /api/v1/turns``: turns accepted per second (each a new thread of 2 messages);
- ``GET /api/v1/context``: p50 / p99 latency over random users of the corpus, plus
  the heavy agent with 1,000 facts.

Targets: ≥ 300 turns/s accepted, context p99 ≤ 50 ms. Only ever talks to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))

from bench.corpus import AGENTS, HEAVY_AGENT, HEAVY_USER, django_env, ensure_corpus  # noqa: E402
from bench.serving import HOST, copy_db, free_port, percentile, wait_for  # noqa: E402

MAX_REQUESTS = 20_000


class Load:
    """`concurrency` threads with keep-alive connections, until time or count runs out."""

    def __init__(self, port: int, key: str, seconds: float, max_requests: int, concurrency: int) -> None:
        self.port, self.key = port, key
        self.seconds, self.max_requests, self.concurrency = seconds, max_requests, concurrency
        self.latencies: list[float] = []
        self.statuses: dict[int, int] = {}
        self._issued = 0
        self._lock = threading.Lock()

    def _next(self) -> int | None:
        with self._lock:
            if self._issued >= self.max_requests:
                return None
            self._issued += 1
            return self._issued

    def run(self, make_request) -> float:
        deadline = time.monotonic() + self.seconds

        def worker(seed: int) -> None:
            rng = random.Random(seed)
            conn = http.client.HTTPConnection(HOST, self.port, timeout=30)
            while time.monotonic() < deadline and (n := self._next()) is not None:
                method, path, body = make_request(rng, n)
                headers = {"Authorization": f"Bearer {self.key}"}
                if body is not None:
                    headers["Content-Type"] = "application/json"
                started = time.perf_counter()
                try:
                    conn.request(method, path, body=body, headers=headers)
                    response = conn.getresponse()
                    response.read()
                    status = response.status
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = http.client.HTTPConnection(HOST, self.port, timeout=30)
                    status = 0
                elapsed = time.perf_counter() - started
                with self._lock:
                    self.latencies.append(elapsed)
                    self.statuses[status] = self.statuses.get(status, 0) + 1
            conn.close()

        started = time.monotonic()
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(self.concurrency)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="per phase")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    corpus = ensure_corpus(quiet=False)
    tmp = Path(tempfile.mkdtemp(prefix="bench-api-"))
    proc: subprocess.Popen | None = None
    try:
        (tmp / "var" / "staticfiles").mkdir(parents=True)
        copy_db(corpus / "var" / "db.sqlite3", tmp / "var" / "db.sqlite3")
        # A throwaway MEMORY_ROOT: the corpus's card folders linked (nothing here writes
        # cards), its index copied, and the API's rate-limit and lock files of our own.
        root = tmp / "memory"
        (root / ".retrieval").mkdir(parents=True)
        for name in ("users", "projects"):
            if (corpus / "memory" / name).exists():
                (root / name).symlink_to(corpus / "memory" / name)
        for index_file in (corpus / "memory" / ".retrieval").glob("*.sqlite3"):
            copy_db(index_file, root / ".retrieval" / index_file.name)
        env = {
            **django_env(corpus),
            "MEMORY_ROOT": str(root),
            "VAR_DIR": str(tmp / "var"),
            "DATABASE_URL": f"sqlite:///{tmp / 'var' / 'db.sqlite3'}",
            "DEBUG": "0",
            "LOG_LEVEL": "WARNING",
        }
        manage = [sys.executable, str(BASE_DIR / "manage.py")]
        subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], env=env, check=True, cwd=BASE_DIR)
        key = subprocess.run(
            [*manage, "create_api_key", "bench", "--rate-limit", "0"],
            env=env,
            check=True,
            cwd=BASE_DIR,
            capture_output=True,
            text=True,
        ).stdout.strip()
        port = free_port()
        gunicorn = Path(sys.executable).with_name("gunicorn")
        command = [str(gunicorn), "memoryadmin.wsgi", "--bind", f"{HOST}:{port}", "--workers", str(args.workers)]
        proc = subprocess.Popen(
            [*command, "--threads", "4", "--log-level", "warning"],
            env=env,
            cwd=BASE_DIR,
        )
        wait_for(port, proc, "/api/v1/openapi.json")

        def turn(rng: random.Random, n: int) -> tuple[str, str, bytes]:
            body = {
                "user_id": f"user{rng.randrange(1000):04d}",
                "agent_name": rng.choice(AGENTS),
                "thread_id": f"bench-{n}",
                "messages": [
                    {
                        "id": f"b{n}-u",
                        "role": "user",
                        "content": "我主要做 Python 后端开发，平时请用中文解释技术问题。",
                    },
                    {"id": f"b{n}-a", "role": "assistant", "content": "好的，之后用中文解释。"},
                ],
            }
            return "POST", "/api/v1/turns", json.dumps(body, ensure_ascii=False).encode()

        def context(rng: random.Random, n: int) -> tuple[str, str, None]:
            if n % 50 == 0:
                user, agent = HEAVY_USER, HEAVY_AGENT
            else:
                user, agent = f"user{rng.randrange(1000):04d}", rng.choice(AGENTS)
            return "GET", f"/api/v1/context?user_id={user}&agent_name={agent}", None

        # Warm both workers (imports, tokenizer, jieba; an index built by an older schema
        # is rebuilt from the files on first use) before measuring.
        probe = http.client.HTTPConnection(HOST, port, timeout=900)
        probe.request(
            "GET", "/api/v1/context?user_id=user0001&agent_name=coder", headers={"Authorization": f"Bearer {key}"}
        )
        probe.getresponse().read()
        probe.close()
        Load(port, key, 10, 40, 4).run(context)
        Load(port, key, 10, 40, 4).run(turn)

        turns = Load(port, key, args.seconds, MAX_REQUESTS, args.concurrency)
        elapsed = turns.run(turn)
        accepted = turns.statuses.get(202, 0)
        ctx = Load(port, key, args.seconds, MAX_REQUESTS, args.concurrency)
        ctx_elapsed = ctx.run(context)
        ok = list(ctx.latencies)
        # The same requests one at a time: the server's own latency, without queueing
        # behind the other client threads on a shared two-core machine.
        single = Load(port, key, min(args.seconds, 10.0), 2000, 1)
        single.run(context)
        load1, _, _ = os.getloadavg()

        print(f"api: gunicorn {args.workers} workers × 4 threads, {args.concurrency} client threads, 127.0.0.1")
        print(
            f"api: POST /turns  {accepted} accepted in {elapsed:.1f}s = {accepted / elapsed:,.0f} turns/s "
            f"(p50 {statistics.median(turns.latencies) * 1000:.1f} ms, p99 {percentile(turns.latencies, 0.99) * 1000:.1f} ms; "
            f"statuses {turns.statuses})  target ≥ 300/s"
        )
        print(
            f"api: GET /context {len(ok)} in {ctx_elapsed:.1f}s = {len(ok) / ctx_elapsed:,.0f}/s, "
            f"p50 {statistics.median(ok) * 1000:.1f} ms, p99 {percentile(ok, 0.99) * 1000:.1f} ms "
            f"(statuses {ctx.statuses}; 101,000-card corpus)  target p99 ≤ 50 ms"
        )
        print(
            f"api: GET /context one client: {len(single.latencies)} requests, "
            f"p50 {statistics.median(single.latencies) * 1000:.1f} ms, p99 {percentile(single.latencies, 0.99) * 1000:.1f} ms"
        )
        print(f"api: load average during the run {load1:.1f} on {os.cpu_count()} cores (other processes included)")
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
