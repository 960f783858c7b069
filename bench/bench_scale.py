"""One machine against two, on one PostgreSQL and one shared file root (issue 24).

    tests/helpers_reliability/postgres.sh .venv/bin/python bench/bench_scale.py [--seconds 8]

Needs PostgreSQL (DATABASE_URL); without it, it says so and exits 0 (`make bench` runs it
through postgres.sh, a throwaway server). In a fresh database of its own it seeds cards through the write function,
then on 127.0.0.1:

1. searches/s: closed-loop clients on ``GET /api/v1/search`` against one "machine"
   (gunicorn 1 worker × 4 threads, its own MEMORY_INDEX_DIR), then the same clients
   split over two machines;
2. turns/s: turns posted through ``/flush`` and extracted by the rule extractor with
   one ``db_worker``, then with one on each machine;
3. the two search designs compared at 100,000 rows, same pre-segmented terms, one
   bucket's postings per query: (a) SQLite FTS5 (what each machine keeps locally),
   (b) PostgreSQL full text with a GIN index over (scope, terms).

On one host the "machines" share its cores: two instances cannot show more than the
cores allow, so the two-machine figure shows the overhead of sharing, not the gain of a
second host (docs/scaling.md says how to read it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.serving import free_port, percentile, wait_for  # noqa: E402

SEED = """
import sys
from datetime import UTC, datetime
from facts.storage.cardfile import Card, Source
from facts.storage.ids import new_fact_id
from facts.storage.writer import Put, commit
words = "tabs spaces python rust coffee tea notes folder editor vim emacs deploy friday".split()
now = datetime(2026, 12, 1, tzinfo=UTC)
cards = [Card(id=new_fact_id(), key=f"seed_{n}", category="context", confidence=0.8, user_id=f"u{n % 50}",
              agent_name="coder", created_at=now, updated_at=now, source=Source(kind="import"),
              content=f"User {n % 50} likes {words[n % 13]} and {words[(n * 7) % 13]}, card {n}.")
         for n in range(int(sys.argv[1]))]
for start in range(0, len(cards), 500):
    commit([Put(c) for c in cards[start:start + 500]], actor="bench", reason="bench")
"""


def pg_admin(url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(sql)


class Machine:
    def __init__(self, name: str, base: dict[str, str], tmp: Path) -> None:
        local = tmp / name
        (local / "var").mkdir(parents=True)
        self.env = {**base, "VAR_DIR": str(local / "var"), "MEMORY_INDEX_DIR": str(local / "index")}
        self.port = free_port()
        self.procs: list[subprocess.Popen] = []
        self.log = (local / "log").open("w")

    def serve(self) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "memoryadmin.wsgi", "--bind", f"127.0.0.1:{self.port}",
             "--workers", "1", "--threads", "4"],
            cwd=REPO, env=self.env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self.procs.append(proc)
        wait_for(self.port, proc, "/api/v1/openapi.json", timeout=90)

    def warm(self, key: str) -> None:
        """One search first: a new machine builds its local index from the files."""
        import httpx

        httpx.get(
            f"http://127.0.0.1:{self.port}/api/v1/search",
            params={"user_id": "u0", "agent_name": "coder", "q": "tabs"},
            headers={"Authorization": f"Bearer {key}"},
            timeout=600,
        ).raise_for_status()

    def work(self) -> None:
        self.procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "manage.py",
                    "db_worker",
                    "--no-reload",
                    "--no-startup-delay",
                    "--interval",
                    "0.1",
                    "--skip-checks",
                ],
                cwd=REPO,
                env=self.env,
                stdout=self.log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs = []


def load(ports: list[int], key: str, seconds: float, clients: int, request) -> tuple[float, float]:
    """Closed-loop clients spread over `ports`: (requests/s, p99 ms)."""
    import httpx

    stop = time.monotonic() + seconds
    latencies: list[float] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        rng = random.Random(n)
        with httpx.Client(base_url=f"http://127.0.0.1:{ports[n % len(ports)]}", timeout=30) as http:
            http.headers["Authorization"] = f"Bearer {key}"
            while time.monotonic() < stop:
                started = time.perf_counter()
                response = request(http, rng, n)
                assert response.status_code in (200, 202), response.text
                with lock:
                    latencies.append(time.perf_counter() - started)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(latencies) / (time.monotonic() - began), percentile(latencies, 0.99) * 1000


def search(http, rng: random.Random, n: int):
    words = ("tabs", "coffee", "python", "editor", "deploy")
    return http.get(
        "/api/v1/search", params={"user_id": f"u{rng.randrange(50)}", "agent_name": "coder", "q": rng.choice(words)}
    )


def turns_per_second(machines: list[Machine], key: str, count: int, env: dict[str, str], tag: str) -> float:
    import httpx

    for machine in machines:
        machine.work()
    time.sleep(3)  # the workers start
    began = time.monotonic()
    with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {key}"}) as http:
        for n in range(count):
            port = machines[n % len(machines)].port
            body = {
                "user_id": f"t{n % 40}",
                "agent_name": "coder",
                "thread_id": f"{tag}{n}",
                "messages": [
                    {"id": f"{tag}m{n}", "role": "user", "content": f"I prefer tabs over spaces in project {n}."}
                ],
            }
            assert http.post(f"http://127.0.0.1:{port}/api/v1/flush", json=body).status_code == 202
    import psycopg

    # Polled with one plain connection: a Django process per poll would eat the cores.
    with psycopg.connect(env["DATABASE_URL"], autocommit=True) as conn:
        while conn.execute("SELECT count(*) FROM facts_turn WHERE status <> 'done'").fetchone()[0]:
            time.sleep(0.1)
    elapsed = time.monotonic() - began
    for machine in machines:
        # keep the web servers: only the workers go
        for proc in machine.procs[1:]:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        machine.procs = machine.procs[:1]
    return count / elapsed


def compare_engines(url: str, rows: int = 100_000, queries: int = 400) -> dict[str, float]:
    """(a) FTS5 against (b) PostgreSQL GIN, same rows, same per-bucket AND query."""
    import psycopg

    rng = random.Random(3)
    vocab = [f"w{n}" for n in range(5000)]
    weights = [1 / (n + 1) for n in range(5000)]  # Zipf-like, as real text
    data = [
        (f"s{n % 10_000}", f"c{n}", " ".join(rng.choices(vocab, weights, k=12)))  # 10k buckets × 10 cards
        for n in range(rows)
    ]
    probes = [(f"s{rng.randrange(10_000)}", rng.choice(vocab[:200])) for _ in range(queries)]
    out: dict[str, float] = {}

    with tempfile.TemporaryDirectory() as tmp:
        db = sqlite3.connect(Path(tmp) / "fts.sqlite3")
        db.execute("CREATE VIRTUAL TABLE fts USING fts5(scope, id UNINDEXED, terms)")
        db.executemany("INSERT INTO fts VALUES (?, ?, ?)", data)
        db.commit()
        times = []
        for scope, word in probes:
            started = time.perf_counter()
            db.execute("SELECT id FROM fts WHERE fts MATCH ? LIMIT 50", (f"scope:{scope} AND terms:{word}",)).fetchall()
            times.append(time.perf_counter() - started)
        out["fts5_p50_ms"], out["fts5_p99_ms"] = percentile(times, 0.5) * 1000, percentile(times, 0.99) * 1000
        out["fts5_mb"] = round((Path(tmp) / "fts.sqlite3").stat().st_size / 1e6, 1)

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE bench_idx (scope text, id text, terms tsvector)")
        with conn.cursor().copy("COPY bench_idx (scope, id, terms) FROM STDIN") as copy:
            for scope, card, terms in data:
                copy.write_row((scope, card, terms))
        conn.execute("CREATE INDEX bench_idx_scope ON bench_idx (scope)")
        conn.execute("CREATE INDEX bench_idx_gin ON bench_idx USING gin (terms)")
        conn.execute("ANALYZE bench_idx")
        times = []
        for scope, word in probes:
            started = time.perf_counter()
            conn.execute(
                "SELECT id, ts_rank(terms, q) FROM bench_idx, to_tsquery('simple', %s) q"
                " WHERE scope = %s AND terms @@ q ORDER BY 2 DESC LIMIT 50",
                (word, scope),
            ).fetchall()
            times.append(time.perf_counter() - started)
        out["pg_p50_ms"], out["pg_p99_ms"] = percentile(times, 0.5) * 1000, percentile(times, 0.99) * 1000
        (size,) = conn.execute("SELECT pg_total_relation_size('bench_idx')").fetchone()  # type: ignore[misc]
        out["pg_mb"] = round(size / 1e6, 1)
        conn.execute("DROP TABLE bench_idx")
    return {k: round(v, 2) for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--cards", type=int, default=5000)
    parser.add_argument("--turns", type=int, default=60)
    args = parser.parse_args()
    base_url = os.environ.get("DATABASE_URL", "")
    if not base_url.startswith(("postgres://", "postgresql://")):
        print(
            "bench_scale: skipped, needs PostgreSQL: tests/helpers_reliability/postgres.sh .venv/bin/python bench/bench_scale.py"
        )
        return
    name = f"bench_scale_{uuid.uuid4().hex[:8]}"
    pg_admin(base_url, f'CREATE DATABASE "{name}"')
    url = base_url.rsplit("/", 1)[0] + "/" + name
    machines: list[Machine] = []
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            env = {
                **os.environ,
                "DJANGO_SETTINGS_MODULE": "memoryadmin.settings",
                "PYTHONPATH": str(REPO),
                "DATABASE_URL": url,
                "MEMORY_ROOT": str(tmp / "shared-root"),
                "VAR_DIR": str(tmp / "var"),
                "DEBUG": "0",
                "ALLOWED_HOSTS": "127.0.0.1",
                "LOG_LEVEL": "WARNING",
                "MEMORY_EMBEDDINGS": os.environ.get("MEMORY_EMBEDDINGS", "off"),
                "TASKS_BACKEND": "django_tasks_db.DatabaseBackend",
                "MEMORY_EXTRACTOR": "rules",
                "MEMORY_DEBOUNCE_SECONDS": "0",
                "API_RATE_LIMIT_PER_MINUTE": "0",
            }
            run: dict[str, Any] = {"cwd": REPO, "env": env, "check": True, "capture_output": True, "text": True}
            subprocess.run([sys.executable, "manage.py", "migrate", "-v0", "--skip-checks"], **run)
            subprocess.run([sys.executable, "-c", "import django; django.setup()\n" + SEED, str(args.cards)], **run)
            key = subprocess.run(
                [sys.executable, "manage.py", "create_api_key", "bench", "--skip-checks"], **run
            ).stdout.strip()
            machines = [Machine(n, env, tmp) for n in ("a", "b")]
            print(f"bench_scale: {args.cards} cards, {args.clients} clients, {os.cpu_count()} cores on this host")
            machines[0].serve()
            machines[0].warm(key)
            one = load([machines[0].port], key, args.seconds, args.clients, search)
            machines[1].serve()
            machines[1].warm(key)
            two = load([m.port for m in machines], key, args.seconds, args.clients, search)
            print(
                f"  searches/s  one machine {one[0]:7.0f} (p99 {one[1]:.0f} ms)   two machines {two[0]:7.0f} (p99 {two[1]:.0f} ms)"
            )
            t1 = turns_per_second(machines[:1], key, args.turns, env, "x")
            t2 = turns_per_second(machines, key, args.turns, env, "y")
            print(f"  turns/s     one worker  {t1:7.1f}                two workers  {t2:7.1f}")
    finally:
        for machine in machines:
            machine.stop()
        pg_admin(base_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    engines = compare_engines(base_url)
    print(
        "  100k rows, one bucket + one term: "
        f"(a) local FTS5 p50 {engines['fts5_p50_ms']} ms p99 {engines['fts5_p99_ms']} ms, {engines['fts5_mb']} MB; "
        f"(b) PostgreSQL GIN p50 {engines['pg_p50_ms']} ms p99 {engines['pg_p99_ms']} ms, {engines['pg_mb']} MB"
    )
    print(json.dumps({"one": one, "two": two, "turns": [t1, t2], "engines": engines}))


if __name__ == "__main__":
    main()
