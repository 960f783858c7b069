"""Write path throughput: filter + gate + write + mirror (+ index listener) for replayed candidates.

    .venv/bin/python bench/bench_write_path.py [--candidates 10000] [--per-run 25]
        [--workers N] [--batch-size N]

The turns go through `manage.py ingest`'s own code (`ingest_lines`: JSON parsing,
validation, replay in group commits of `--batch-size` turns), once with one worker
and once with two (`--workers`: forked processes that split the users), each in a
throwaway MEMORY_ROOT and SQLite database. Each run is one replayed turn
(system prompt, injected memory, user message, tool call, tool result, greeting,
assistant reply) whose model output has `--per-run` candidates: ~60 % accepted (new
keys, and one in ten of those a new value for an existing key), the rest rejected for
thread scope, transactional, low confidence, missing evidence, duplicates or invalid
values. Every card file is written atomically and fsynced; the search index listener
is registered as in production. Targets on the 2-core machine: ≥ 1,000 candidates/s, peak RSS ≤ 400 MB.

Figures vary between runs here: by ±15 % within minutes, and the same code has run
1.7× slower in one hour than in the next (user time 4.8 s against 8.5 s). Runs a few minutes apart on ext4 also pay
for the previous run's clean-up: ext4 will not reuse an inode deleted in the last
minutes and scans past them when it allocates one, which doubles the system time.
`make bench` marks `.bench` with `chattr +T` so each run's folders land in other
block groups; "system" in the CPU line shows what the kernel took.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))


def candidate(i: int, run: int, rng: random.Random) -> tuple[dict, str]:
    """A candidate and the sentence of the user message that is its evidence."""
    sentence = f"事实 {run}-{i}：我在项目 P{i % 7} 里负责模块 M{run}{i}，偏好方案 {rng.randrange(10**6)}。"
    data = {
        # One accepted candidate in ten gives a new value to a key of the same bucket
        # (40 runs earlier: same user and agent), so its old card is superseded.
        "key": f"attribute_{run % 40 if i % 10 == 9 else run}_{i}",
        "content": f"用户在项目 P{i % 7} 里负责模块 M{run}{i}。",
        "category": rng.choice(["preference", "context", "goal", "correction"]),
        "scope": "user",
        "durability": "durable",
        "authority": "descriptive",
        "confidence": round(rng.uniform(0.75, 1.0), 2),
        "evidence_message_id": "u1",
        "evidence_text": sentence[:-1],
    }
    roll = i % 20
    if roll == 0:
        data["scope"] = "thread"
    elif roll == 1:
        data["authority"] = "transactional"
    elif roll == 2:
        data["confidence"] = 0.3
    elif roll == 3:
        data["evidence_text"] = "这句话用户从来没说过"
    elif roll == 4:
        data["confidence"] = 1.2  # invalid, rejected alone
    return data, sentence


def warm_up() -> None:
    """Imports, jieba's dictionary, the index file and the first connection (not
    measured: a worker process pays them once, at start-up)."""
    from facts.judging.pipeline import run_turns_now
    from retrieval import indexconn
    from retrieval.warmup import warm

    warm()
    # The empty store's index, as `bootstrap` makes it on a fresh install: a write never
    # builds a missing index (a background rebuild would scan the files while we write).
    indexconn.connection()

    run_turns_now(
        user_id="warm", agent_name="w", thread_id="w", messages=[{"role": "user", "content": "我用 vim", "id": "w1"}],
        model_output={"facts": []},
    )  # fmt: skip


def ingest(lines: list[str], batch_size: int, workers: int) -> tuple[int, int]:
    """`manage.py ingest`'s own path: parse and validate each JSON line, replay in group
    commits, in `workers` forked processes."""
    from memoryadmin.management.commands.ingest import ingest_lines

    total = saved = 0
    for number, outcome in ingest_lines(enumerate(lines, start=1), batch_size=batch_size, workers=workers):
        if isinstance(outcome, ValueError):
            raise SystemExit(f"line {number}: {outcome}")
        total += len(outcome["candidates"])
        saved += outcome["saved"]
    return total, saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=10_000)
    parser.add_argument("--per-run", type=int, default=25)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument(
        "--batch-size", type=int, default=None, help="turns per group commit (default: manage.py ingest's)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="as `manage.py ingest --workers` (default: one run with 1, then one with 2)",
    )
    args = parser.parse_args()
    if args.workers is None:
        for workers in (1, 2):
            print(f"-- manage.py ingest --workers {workers}", flush=True)
            subprocess.run([sys.executable, __file__, *sys.argv[1:], f"--workers={workers}"], check=True)
        return

    workdir = Path(
        tempfile.mkdtemp(prefix="bench-write-", dir=BASE_DIR / ".bench" if (BASE_DIR / ".bench").is_dir() else None)
    )
    os.environ["MEMORY_ROOT"] = str(workdir / "memory")
    os.environ["DATABASE_URL"] = f"sqlite:///{workdir / 'db.sqlite3'}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "memoryadmin.settings"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("DEBUG", "0")  # as in production: no query log
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)

    from facts.judging.pipeline import REPLAY_BATCH
    from facts.models import Candidate, FactCard
    from facts.storage import hooks

    try:
        rng = random.Random(7)
        runs = max(1, args.candidates // args.per_run)
        turns = []
        for run in range(runs):
            cands, sentences = zip(*(candidate(i, run, rng) for i in range(args.per_run)), strict=True)
            facts = list(cands)
            if run >= args.users * 2 and run % 3 == 0:
                facts[5] = dict(facts[5], content=f"重复内容 {run % 10}")  # some repeats → duplicate
            user = f"user-{run % args.users}"
            messages = [
                {"role": "system", "content": "你是技术助手。", "id": f"r{run}-s"},
                {"role": "user", "content": "<memory>旧记忆</memory>", "id": f"r{run}-m", "origin": "memory"},
                {
                    "role": "user",
                    "content": "".join(sentences)
                    + " 重复内容 0 重复内容 1 重复内容 2 重复内容 3 重复内容 4 重复内容 5 重复内容 6 重复内容 7 重复内容 8 重复内容 9",
                    "id": "u1",
                },
                {
                    "role": "assistant",
                    "content": "",
                    "id": f"r{run}-a1",
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}],
                },
                {"role": "tool", "content": "result", "tool_call_id": "c1", "id": f"r{run}-t"},
                {"role": "assistant", "content": "明白。", "id": f"r{run}-a2"},
                {"role": "user", "content": "好的，谢谢", "id": f"r{run}-u2"},
                {"role": "assistant", "content": "不客气", "id": f"r{run}-a3"},
            ]
            for fact in facts:
                if fact["evidence_message_id"] == "u1":
                    fact["evidence_message_id"] = f"r{run}-u1"
            messages[2]["id"] = f"r{run}-u1"
            turns.append(
                {
                    "user_id": user,
                    "agent_name": f"agent-{run % 2}",
                    "thread_id": f"thread-{run}",
                    "messages": messages,
                    "model_output": {"facts": facts},
                }
            )
        listeners = len(hooks._card_listeners)
        batch_size = args.batch_size or REPLAY_BATCH
        lines = [json.dumps(t, ensure_ascii=False) for t in turns]
        warm_up()
        started = time.perf_counter()
        before = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
        total, saved = ingest(lines, batch_size, args.workers)
        elapsed = time.perf_counter() - started
        after = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
        user_s = sum(a.ru_utime - b.ru_utime for a, b in zip(after, before, strict=True))
        system = sum(a.ru_stime - b.ru_stime for a, b in zip(after, before, strict=True))
        cpu = user_s + system
        rss_mb = max(usage.ru_maxrss for usage in after) / 1024  # the largest process
        accepted = Candidate.objects.filter(verdict="accepted").count()
        reasons: dict[str, int] = {}
        for codes in Candidate.objects.values_list("reasons", flat=True):
            for code in codes:
                reasons[code] = reasons.get(code, 0) + 1
        print(
            f"runs: {len(turns)} × {args.per_run} candidates, {args.users} users × 2 agents, "
            f"index listeners: {listeners}, workers: {args.workers}, turns per group commit: {batch_size}"
        )
        print(f"candidates: {total}  accepted: {accepted}  cards written: {saved}  rejected: {reasons}")
        print(
            f"live cards: {FactCard.objects.filter(status='active').count()}  superseded: {FactCard.objects.filter(status='superseded').count()}"
        )
        rate = total / elapsed
        print(
            f"elapsed: {elapsed:.2f} s  throughput: {rate:,.0f} candidates/s (target ≥ 1,000: {'ok' if rate >= 1000 else 'MISSED'})"
        )
        print(
            f"per run: {elapsed / len(turns) * 1000:.1f} ms  peak RSS: {rss_mb:.0f} MB (target ≤ 400: {'ok' if rss_mb <= 400 else 'MISSED'})"
        )
        print(
            f"CPU time: {cpu:.2f} s (user {user_s:.2f} s, system {system:.2f} s; {total / cpu:,.0f} candidates per CPU-second; "
            f"load average {os.getloadavg()[0]:.1f})"
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
