"""Dashboard pages under a short, bounded load on 127.0.0.1, with the 100,000-card corpus.

    .venv/bin/python bench/bench_dashboard.py [--seconds 6] [--max-requests 400] [--concurrency 4]

Works on a throwaway copy of the corpus database (bench/corpus.py) with its memory files
used read-only, adds a review history to it (runs, 30,000 candidates, audit events),
then:

1. in-process, per page: the server time of one warm request, its query count and its
   slowest SQL statement (with the plan SQLite chose for it);
2. over HTTP, gunicorn (2 workers × 4 threads; `make run` serves with waitress) on a free local port:
   p50 / p95 latency per page, each phase bounded by time *and* request count.

Target: p95 ≤ 150 ms per page. Only ever talks to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))

from bench.corpus import AGENTS, HEAVY_AGENT, HEAVY_USER, django_env, ensure_corpus  # noqa: E402
from bench.serving import HOST, copy_db, free_port, percentile, wait_for  # noqa: E402

TARGET_MS = 150.0
CANDIDATES = 30_000
REASONS = [
    "scope_thread",
    "temporary",
    "transactional",
    "low_confidence",
    "evidence_missing",
    "evidence_not_user",
    "duplicate",
]


def pages(rng: random.Random) -> dict[str, str]:
    user = f"user{rng.randrange(1000):04d}"
    agent = rng.choice(AGENTS)
    return {
        "overview": "/",
        "review queue": "/review/",
        "review queue (filtered)": f"/review/?reason=low_confidence&user={user}",
        "facts list": "/facts/",
        "facts list (filtered)": f"/facts/?user={user}&agent={agent}&status=active",
        "facts list (page 50)": "/facts/?status=active&page=50",
        "conflicts": "/conflicts/",
        "context preview": f"/preview/?user={user}&agent={agent}&mode=auto",
        "context preview (1,000 facts)": f"/preview/?user={HEAVY_USER}&agent={HEAVY_AGENT}&mode=auto",
    }


def seed_history() -> None:
    """Runs, candidates (most reviewed, some waiting) and audit events, as after months of use."""
    from django.utils import timezone

    from facts.models import AuditEvent, Candidate, ExtractionRun

    rng = random.Random(11)
    now = timezone.now()
    runs = [
        ExtractionRun(
            user_id=f"user{i % 1000:04d}",
            agent_name=AGENTS[i % 4],
            thread_id=f"t-{i}",
            filtered_rows=[{"id": "m1", "role": "user", "content": "I prefer short answers."}],
            status="succeeded" if i % 17 else "failed",
            error="" if i % 17 else "model timeout",
        )
        for i in range(5000)
    ]
    ExtractionRun.objects.bulk_create(runs, batch_size=1000)
    run_ids = list(ExtractionRun.objects.values_list("pk", flat=True))
    candidates = []
    for i in range(CANDIDATES):
        rejected = rng.random() < 0.4
        state = rng.choice(["approved", "dismissed", "pending"] if rejected else ["none", "none", "pending"])
        candidates.append(
            Candidate(
                run_id=rng.choice(run_ids),
                kind="fact",
                user_id=f"user{rng.randrange(1000):04d}",
                agent_name=rng.choice(AGENTS),
                key=f"key_{i % 300}",
                content=f"Candidate fact number {i}.",
                category="preference",
                scope="user",
                durability="durable",
                authority="descriptive",
                confidence=rng.random(),
                verdict="rejected" if rejected else "accepted",
                reasons=rng.sample(REASONS, rng.randint(1, 2)) if rejected else [],
                review_state=state,
            )
        )
    Candidate.objects.bulk_create(candidates, batch_size=2000)
    # spread them over the last 30 days so the charts have something to draw
    with_dates = list(Candidate.objects.only("pk"))
    for c in with_dates:
        c.created_at = now - timedelta(minutes=rng.randrange(30 * 24 * 60))
    Candidate.objects.bulk_update(with_dates, ["created_at"], batch_size=2000)
    AuditEvent.objects.bulk_create(
        [AuditEvent(actor="bench", action="approve", target=f"candidate:{i}") for i in range(10_000)], batch_size=2000
    )


def profile_pages(repeat: int) -> dict[str, dict[str, object]]:
    """Server time per page in-process (no network, no client): `repeat` requests each,
    over random users, and the slowest SQL statement seen with SQLite's plan for it."""
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client

    user = User.objects.get(username="bench")
    client = Client()
    client.force_login(user)
    out: dict[str, dict[str, object]] = {}
    rng = random.Random(3)
    for name in pages(rng):
        for _ in range(2):
            client.get(pages(rng)[name])
        times: list[float] = []
        counts: list[int] = []
        slowest: tuple[float, str, tuple] = (0.0, "", ())
        statuses: set[int] = set()
        for _ in range(repeat):
            queries: list[tuple[float, str, tuple]] = []

            def timed(execute, sql, params, many, context, queries=queries):
                started = time.perf_counter()
                try:
                    return execute(sql, params, many, context)
                finally:
                    queries.append((time.perf_counter() - started, sql, tuple(params or ())))

            path = pages(rng)[name]
            started = time.perf_counter()
            with connection.execute_wrapper(timed):
                response = client.get(path)
            times.append(time.perf_counter() - started)
            statuses.add(response.status_code)
            counts.append(len(queries))
            slowest = max([slowest, *queries], key=lambda q: q[0])
        plan = ""
        if slowest[1] and connection.vendor == "sqlite":
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN QUERY PLAN " + slowest[1], slowest[2])
                plan = " | ".join(row[-1] for row in cursor.fetchall())
        out[name] = {
            "statuses": sorted(statuses),
            "p50": percentile(times, 0.5) * 1000,
            "p95": percentile(times, 0.95) * 1000,
            "queries": max(counts),
            "slowest_ms": slowest[0] * 1000,
            "slowest_sql": slowest[1],
            "plan": plan,
        }
    return out


def session_cookie() -> str:
    from django.contrib.auth.models import User
    from django.test import Client

    User.objects.filter(username="bench").delete()
    user = User.objects.create_superuser("bench", "", "bench-only")
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def load(
    port: int, cookie: str, make_path, *, seconds: float, max_requests: int, concurrency: int
) -> tuple[list[float], dict[int, int]]:
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    issued = [0]
    deadline = time.monotonic() + seconds

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        conn = http.client.HTTPConnection(HOST, port, timeout=30)
        while time.monotonic() < deadline:
            with lock:
                if issued[0] >= max_requests:
                    break
                issued[0] += 1
            started = time.perf_counter()
            try:
                conn.request("GET", make_path(rng), headers={"Cookie": f"sessionid={cookie}"})
                response = conn.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection(HOST, port, timeout=30)
                status = 0
            with lock:
                latencies.append(time.perf_counter() - started)
                statuses[status] = statuses.get(status, 0) + 1
        conn.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, statuses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="per page")
    parser.add_argument("--max-requests", type=int, default=400, help="per page")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=30, help="in-process requests per page")
    args = parser.parse_args()

    corpus = ensure_corpus()
    work = Path(tempfile.mkdtemp(prefix="bench-dashboard-", dir=BASE_DIR / ".bench"))
    proc = None
    try:
        copy_db(corpus / "var" / "db.sqlite3", work / "db.sqlite3")
        env = {
            **django_env(corpus),
            "VAR_DIR": str(work),
            "DATABASE_URL": f"sqlite:///{work / 'db.sqlite3'}",
            "DEBUG": "false",
            "LOG_LEVEL": "WARNING",
        }
        (work / "staticfiles").mkdir()
        os.environ.update(env)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
        started = time.monotonic()
        seed_history()
        print(f"seeded 5,000 runs, {CANDIDATES:,} candidates, 10,000 audit events in {time.monotonic() - started:.1f}s")
        cookie = session_cookie()

        print(f"\nserver time in-process, {args.repeat} requests per page (target p95 ≤ {TARGET_MS:.0f} ms):")
        print(f"  {'page':32s} {'p50 ms':>8s} {'p95 ms':>8s} {'queries':>8s} {'slowest SQL':>12s}")
        profile = profile_pages(args.repeat)
        missed = []
        for name, row in profile.items():
            ok = row["p95"] <= TARGET_MS and row["statuses"] == [200]
            missed += [] if ok else [name]
            print(
                f"  {name:32s} {row['p50']:8.1f} {row['p95']:8.1f} {row['queries']:8d} {row['slowest_ms']:9.1f} ms"
                f"  {'ok' if ok else 'MISSED'} {row['statuses']}"
            )
        worst = max(profile.items(), key=lambda item: item[1]["slowest_ms"])  # type: ignore[arg-type, return-value]
        print(f"\nslowest query ({worst[0]}, {worst[1]['slowest_ms']:.1f} ms): {str(worst[1]['slowest_sql'])[:300]}")
        print(f"  plan: {worst[1]['plan']}")
        print("server time: all pages within target" if not missed else f"server time missed: {', '.join(missed)}")

        port = free_port()
        gunicorn = str(Path(sys.executable).parent / "gunicorn")
        proc = subprocess.Popen(
            [
                gunicorn,
                "memoryadmin.wsgi",
                "--bind",
                f"{HOST}:{port}",
                "--workers",
                "2",
                "--threads",
                "4",
                "--log-level",
                "warning",
            ],
            env=env,
            cwd=BASE_DIR,
        )
        wait_for(port, proc, "/login/")
        print(
            f"\nover HTTP, {args.concurrency} clients, each page ≤ {args.seconds:.0f} s and ≤ {args.max_requests} requests:"
        )
        print(f"  {'page':32s} {'n':>5s} {'p50 ms':>8s} {'p95 ms':>8s}  target ≤ {TARGET_MS:.0f} ms")
        failures = []
        for name in pages(random.Random(0)):

            def make_path(rng: random.Random, name: str = name) -> str:
                return pages(rng)[name]

            latencies, statuses = load(
                port,
                cookie,
                make_path,
                seconds=args.seconds,
                max_requests=args.max_requests,
                concurrency=args.concurrency,
            )
            p50, p95 = percentile(latencies, 0.5) * 1000, percentile(latencies, 0.95) * 1000
            ok = p95 <= TARGET_MS and set(statuses) == {200}
            failures += [] if ok else [name]
            print(
                f"  {name:32s} {len(latencies):5d} {p50:8.1f} {p95:8.1f}  {'ok' if ok else 'MISSED'}  statuses {statuses}"
            )
        print("HTTP: all pages within target" if not failures else f"HTTP missed the target: {', '.join(failures)}")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
