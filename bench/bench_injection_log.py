"""What the injection log costs the context endpoint.

    .venv/bin/python bench/bench_injection_log.py [--n 2000] [--cards 25]

In a throwaway MEMORY_ROOT and SQLite database: one user × agent with `--cards` cards;
`serve_context` (what GET /api/v1/context runs) is timed with the log's request-side
work (buffering one entry) and with it stubbed out, interleaved so the machine's load
hits both alike; then the time to flush a buffer of entries (the background thread's
work, off the request path). Target: the log adds at most 1 ms to the p50.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))
TARGET_MS = 1.0


def _p50(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="context calls per variant")
    parser.add_argument("--cards", type=int, default=25)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-injlog-"))
    try:
        os.environ.update(
            {
                "DJANGO_SETTINGS_MODULE": "memoryadmin.settings",
                "MEMORY_ROOT": str(work / "memory"),
                "VAR_DIR": str(work),
                "DATABASE_URL": f"sqlite:///{work / 'db.sqlite3'}",
                "DEBUG": "false",
                "LOG_LEVEL": "WARNING",
                "API_USAGE_FLUSH_SECONDS": "3600",  # flushed by hand below, timed apart
            }
        )
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
        from facts.models import Injection
        from facts.storage.cardfile import Card, Source, now_utc
        from facts.storage.ids import new_fact_id
        from facts.storage.writer import Put, commit
        from memoryadmin import api_service

        api_service._ensure_flusher = lambda: None
        at = now_utc()
        cards = [
            Card(
                id=new_fact_id(), key=f"k{i}", category="preference", confidence=0.9, user_id="alice",
                agent_name="coder", created_at=at, updated_at=at, source=Source(kind="manual"),
                content=f"The user prefers option {i} when choosing tools for the backend service.",
            )
            for i in range(args.cards)
        ]  # fmt: skip
        commit([Put(c, None) for c in cards], actor="bench")
        scope = api_service.Scope("alice", "coder")
        real = api_service.log_injection

        def off(*_a: object, **_k: object) -> None:
            return None

        for _ in range(50):  # warm caches (tokenizer, render)
            api_service.serve_context(scope)
        api_service.flush_usage()
        with_log: list[float] = []
        without: list[float] = []
        buffer_only: list[float] = []
        for i in range(args.n * 2):
            logged = i % 2 == 0
            api_service.log_injection = real if logged else off
            t = time.perf_counter()
            api_service.serve_context(scope)
            (with_log if logged else without).append((time.perf_counter() - t) * 1000)
        api_service.log_injection = real
        ids = [c.id for c in cards]
        for _ in range(args.n):
            t = time.perf_counter()
            real(scope, "context", ids, "x" * 2000, door="api", mode="auto", tokens=500)
            buffer_only.append((time.perf_counter() - t) * 1000)
        pending = len(api_service._served)
        t = time.perf_counter()
        api_service.flush_usage()
        flush_ms = (time.perf_counter() - t) * 1000
        delta = _p50(with_log) - _p50(without)
        print(f"serve_context with {args.cards} cards, n={args.n} each (interleaved):")
        print(f"  with the log     p50 {_p50(with_log):.3f} ms")
        print(f"  without the log  p50 {_p50(without):.3f} ms")
        print(
            f"  added by the log p50 {delta:+.3f} ms  (target <= {TARGET_MS} ms: {'ok' if delta <= TARGET_MS else 'MISSED'})"
        )
        print(f"  buffering alone  p50 {_p50(buffer_only) * 1000:.1f} us")
        print(
            f"flush of {pending} entries x {args.cards} cards: {flush_ms:.0f} ms "
            f"({flush_ms / max(pending, 1) * 1000:.0f} us per entry, background thread); "
            f"{Injection.objects.count()} rows"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
