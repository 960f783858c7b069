"""Read-path benchmark on the 100k-card corpus (bench/corpus.py).

    .venv/bin/python bench/bench_read_path.py [--quick]

Prints: the rate at which one process reads card files and parses their front matter
with PyYAML's C loader (the yardstick of issue 23: on a shared machine a rebuild is
judged as a ratio to it, measured in the same run); rebuild from the files (index
alone, and the whole ``reindex`` with the mirror) with the derived-data cache warm, in
cards/s, with that ratio and peak RSS; a single card's incremental index update at 100k
rows (its terms and vector prepared first, as the write path does while it fsyncs);
lexical search (embeddings off) p99;
search latency over 1,000 short and 300 natural-language queries scoped to one
user × agent; render latency for agents with 25 and 1,000 facts; the RSS of this
process after serving all of it. Latencies are given as wall time and as this
thread's CPU time: on a shared machine the gap between the two is other processes'
load, not this code.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus

# Issue 23's targets (100k cards, this 2-core machine). Hybrid search's own targets
# (p50 ≤ 3 ms, p99 ≤ 10 ms, serving RSS ≤ 350 MB) are judged by bench_hybrid.py.
TARGETS = {
    "reindex_cards_per_s": 12000,
    "reindex_ratio": 0.75,  # × the single-process read + CSafeLoader rate
    "index_rebuild_cards_per_s": 15000,
    "rebuild_peak_rss_mb": 500,
    "update_p99_ms": 2,
    "lexical_search_p99_ms": 1,
    "render_25_p50_ms": 0.45,
    "render_1000_p50_ms": 0.6,
}


def _read_parse_rate(root: Path, sample: int = 20000) -> float:
    """Cards/s of one process reading card files and parsing their front matter with
    ``yaml.CSafeLoader`` (nothing else): what issue 23 compares a rebuild with."""
    import yaml

    paths = sorted((root / "memory" / "users").glob("*/agents/*/facts/*/*.md"))
    step = max(1, len(paths) // sample)
    picked = paths[::step][:sample]
    started = time.perf_counter()
    for path in picked:
        text = path.read_text(encoding="utf-8")
        yaml.load(text.split("---\n", 2)[1], Loader=yaml.CSafeLoader)
    return len(picked) / (time.perf_counter() - started)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def _lat(name: str, fn: Callable[[], object], runs: list[Callable[[], object]] | None = None, n: int = 0) -> dict:
    wall: list[float] = []
    cpu: list[float] = []
    calls = runs or [fn] * n
    for call in calls:
        w, c = time.perf_counter(), time.thread_time()
        call()
        cpu.append((time.thread_time() - c) * 1000)
        wall.append((time.perf_counter() - w) * 1000)
    row = {
        "p50_ms": round(_pct(wall, 0.5), 3),
        "p99_ms": round(_pct(wall, 0.99), 3),
        "cpu_p50_ms": round(_pct(cpu, 0.5), 3),
        "cpu_p99_ms": round(_pct(cpu, 0.99), 3),
        "n": len(calls),
    }
    print(
        f"{name:<38} p50 {row['p50_ms']:7.3f} ms  p99 {row['p99_ms']:7.3f} ms   "
        f"(cpu p50 {row['cpu_p50_ms']:.3f} / p99 {row['cpu_p99_ms']:.3f})  n={row['n']}",
        flush=True,
    )
    return row


_INDEX_ONLY = """
import json, resource, sys, time
import django
django.setup()
from facts.storage import snapshots
from facts.storage.store import get_store
from retrieval import indexbuild
t = time.monotonic(); c = time.process_time()
snap = snapshots.snapshot(get_store())
res = indexbuild.rebuild_from_snapshot(snap)
wall = time.monotonic() - t
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
me = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"cards": len(snap.cards), "seconds": wall,
                  "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
                  "peak_mb": max(me.ru_maxrss, kids.ru_maxrss) / 1024, **res}))
"""


_MEASURED = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, text=True, check=True)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stdout.write(done.stdout.rstrip("\\n") + "\\n")
print(json.dumps({"peak_mb": usage.ru_maxrss / 1024, "cpu_s": usage.ru_utime + usage.ru_stime}))
"""


def _rebuilds(root: Path) -> dict:
    env = corpus.django_env(root)
    results: dict = {}
    # Once first so the cache of derived data is warm (a no-op when it already is).
    subprocess.run(
        [sys.executable, str(corpus.BASE_DIR / "manage.py"), "reindex", "--no-progress", "--skip-checks"],
        env=env,
        cwd=corpus.BASE_DIR,
        capture_output=True,
        check=True,
    )
    rate = _read_parse_rate(root)
    results["read_parse_cards_per_s"] = round(rate)
    print(f"{'read + CSafeLoader, one process':<38} {rate:8,.0f} cards/s  (the yardstick)", flush=True)
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", _INDEX_ONLY], env=env, cwd=corpus.BASE_DIR, capture_output=True, text=True, check=True
    )
    data = json.loads(out.stdout.strip().splitlines()[-1])
    rate = data["cards"] / data["seconds"]
    results["index_rebuild"] = {
        "cards": data["cards"],
        "ratio": round(rate / results["read_parse_cards_per_s"], 2),
        "seconds": round(data["seconds"], 2),
        "cards_per_s": round(rate),
        "cards_per_cpu_s": round(data["cards"] / data["cpu_s"]),
        "peak_rss_mb": round(data["peak_mb"]),
    }
    print(
        f"{'index rebuild from the files':<38} {rate:8,.0f} cards/s  ({data['cards']} cards in {data['seconds']:.1f}s, "
        f"{data['cards'] / data['cpu_s']:,.0f} cards per CPU-second over all processes, peak RSS {data['peak_mb']:.0f} MB, "
        f"{rate / results['read_parse_cards_per_s']:.2f} × read+parse)",
        flush=True,
    )
    started = time.monotonic()
    # Run through a wrapper that reports the rusage of the reindex alone: this process's
    # own RUSAGE_CHILDREN peak would be the largest child it ever waited for (the cold
    # reindex that built the corpus, say), not this one.
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _MEASURED,
            sys.executable,
            str(corpus.BASE_DIR / "manage.py"),
            "reindex",
            "--json",
            "--skip-checks",
        ],
        env=env,
        cwd=corpus.BASE_DIR,
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.monotonic() - started
    lines = out.stdout.strip().splitlines()
    usage = json.loads(lines[-1])
    data = json.loads("\n".join(lines[:-1]))
    cpu = usage["cpu_s"]
    results["reindex"] = {
        "cards": data["cards"],
        "ratio": round(data["cards"] / wall / results["read_parse_cards_per_s"], 2),
        "seconds": round(wall, 2),
        "cards_per_s": round(data["cards"] / wall),
        "cards_per_cpu_s": round(data["cards"] / cpu),
        "peak_rss_mb": round(usage["peak_mb"]),
    }
    print(
        f"{'reindex (mirror + index) from files':<38} {data['cards'] / wall:8,.0f} cards/s  ({wall:.1f}s, "
        f"{data['cards'] / cpu:,.0f} cards per CPU-second, peak RSS of the largest process "
        f"{usage['peak_mb']:.0f} MB, {data['cards'] / wall / results['read_parse_cards_per_s']:.2f} × read+parse)",
        flush=True,
    )
    return results


def _rss_mb() -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=corpus.DEFAULT_ROOT)
    parser.add_argument("--skip-rebuild", action="store_true")
    parser.add_argument("--json", action="store_true", help="also print every figure as one JSON line")
    args = parser.parse_args()
    root = corpus.ensure_corpus(args.root.resolve())
    print(f"== read path on {root} ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})", flush=True)
    figures: dict[str, object] = {}
    if not args.skip_rebuild:
        figures.update(_rebuilds(root))

    os.environ.update(corpus.django_env(root))
    import django

    django.setup()
    from facts.storage.store import Bucket, get_store
    from retrieval import index, reads
    from retrieval.render import render_context
    from retrieval.search import search

    rng = random.Random(42)
    now = corpus.NOW
    corpus.english_words(), corpus.chinese_words()
    store = get_store()
    print(f"index rows: {reads.count()}", flush=True)
    # A serving process has jieba and cl100k loaded after its first requests (~1 s and
    # ~0.3 s once): load them before timing steady-state calls.
    from retrieval.tokens import count_tokens
    from retrieval.warmup import warm

    warm()
    count_tokens("warm")

    # Incremental update of one card at 100k rows (content changes, so FTS and stats move).
    cards = []
    for n in range(200):
        user, agent = f"user{rng.randrange(1000):04d}", rng.choice(corpus.AGENTS)
        card_id = corpus._fact_id(user, agent, rng.randrange(25))
        card = store.read_card(Bucket(user_id=user, agent_name=agent), card_id)
        assert card is not None
        cards.append((card, card.model_copy(update={"content": card.content + f" edited {n}"})))
    # Tokenized and embedded first, as the write path does while its files are fsynced.
    index.prepare([e for _, e in cards] + [o for o, _ in cards])
    figures["update"] = _lat(
        "incremental update (1 card, 100k rows)",
        lambda: None,
        runs=[lambda e=e: index.update([e], []) for _, e in cards],  # type: ignore[misc]
    )
    for original, _ in cards:  # put the corpus back as the files have it
        index.update([original], [])

    def scoped(query: str) -> Callable[[], object]:
        user, agent = f"user{rng.randrange(1000):04d}", rng.choice(corpus.AGENTS)
        return lambda: search(query, user_id=user, agent_name=agent, now=now)

    short = [corpus.words(rng, i % 2 == 0, rng.randint(1, 4)) for i in range(1000)]
    natural = [corpus.sentence(rng, i % 2 == 0, rng.randint(5, 15)) for i in range(300)]
    figures["search_short"] = _lat(
        "search, 1,000 short queries (1–4 words)", lambda: None, runs=[scoped(q) for q in short]
    )
    figures["search_natural"] = _lat(
        "search, 300 natural-language queries", lambda: None, runs=[scoped(q) for q in natural]
    )
    hits = sum(len(scoped(q)()) for q in short[:200]) / 200  # type: ignore[arg-type, misc]
    print(f"  (short queries return {hits:.1f} hits on average)")
    from django.conf import settings

    settings.MEMORY_EMBEDDINGS = False
    figures["search_lexical"] = _lat(
        "lexical search (embeddings off), short", lambda: None, runs=[scoped(q) for q in short]
    )
    settings.MEMORY_EMBEDDINGS = True

    def render(user: str, agent: str) -> Callable[[], object]:
        return lambda: render_context(user_id=user, agent_name=agent, now=now)

    small = [render(f"user{rng.randrange(1000):04d}", rng.choice(corpus.AGENTS)) for _ in range(300)]
    figures["render_25"] = _lat("render, agent with 25 facts", lambda: None, runs=small)
    heavy = render(corpus.HEAVY_USER, corpus.HEAVY_AGENT)
    figures["render_1000"] = _lat("render, agent with 1,000 facts", heavy, n=300)
    from retrieval import render as render_module

    def cold() -> None:
        render_module._piece_tokens.cache_clear()
        heavy()

    figures["render_1000_cold"] = _lat("render, 1,000 facts, token caches cold", cold, n=100)
    sample: Any = heavy()
    print(
        f"  (1,000-fact render: {sample.tokens} tokens, {len(sample.included)} included, {len(sample.excluded)} excluded)"
    )

    rss, hwm = _rss_mb()
    figures["serving_rss_mb"] = round(rss)
    figures["serving_peak_rss_mb"] = round(hwm)
    print(f"{'serving process RSS':<38} {rss:.0f} MB (peak {hwm:.0f} MB)")

    print("== against the targets (issue 23)")
    rebuilt: Any = figures.get("index_rebuild") or {}
    whole: Any = figures.get("reindex") or {}
    checks = [
        ("reindex ≥ 12,000 cards/s (warm)", whole.get("cards_per_s"), TARGETS["reindex_cards_per_s"], True),
        ("reindex ≥ 0.75 × read+parse", whole.get("ratio"), TARGETS["reindex_ratio"], True),
        (
            "index rebuild ≥ 15,000 cards/s (warm)",
            rebuilt.get("cards_per_s"),
            TARGETS["index_rebuild_cards_per_s"],
            True,
        ),
        ("rebuild peak RSS ≤ 500 MB", whole.get("peak_rss_mb"), TARGETS["rebuild_peak_rss_mb"], False),
        ("update p99 ≤ 2 ms", figures["update"]["p99_ms"], TARGETS["update_p99_ms"], False),
        ("lexical search p99 ≤ 1 ms", figures["search_lexical"]["p99_ms"], TARGETS["lexical_search_p99_ms"], False),
        ("render 25 facts p50 ≤ 0.45 ms", figures["render_25"]["p50_ms"], TARGETS["render_25_p50_ms"], False),
        ("render 1,000 facts p50 ≤ 0.6 ms", figures["render_1000"]["p50_ms"], TARGETS["render_1000_p50_ms"], False),
    ]
    for label, value, target, higher in checks:
        if value is None:
            print(f"  {label:<40} not measured")
            continue
        ok = value >= target if higher else value <= target
        print(f"  {label:<40} {value:>10}  {'ok' if ok else 'MISSED'}")
    print(
        "  (latencies are wall time; their CPU time is printed beside them above: on this shared machine a gap "
        "between the two is other processes' load)"
    )
    if rebuilt and rebuilt.get("cards_per_s", 0) < TARGETS["index_rebuild_cards_per_s"]:
        cores = os.cpu_count() or 1
        print(
            f"  what bounds the warm rebuild: {rebuilt['cards_per_cpu_s']:,} cards per CPU-second over all its "
            f"processes, so at most ~{rebuilt['cards_per_cpu_s'] * cores:,} cards/s on {cores} idle cores. A warm "
            "rebuild parses no card file it has seen (the scan cache, docs/derived-cache.md): per card a scanning "
            "process reads the file, hashes it and looks the digest up (~40-60 µs); the parent unpickles what they "
            "send (~3 µs) and checks each card's folder; after the scan it fills the index in one transaction "
            "(~3.3 s at 100k: the bulk insert, its secondary indexes made afterwards, FTS5 'rebuild' and "
            "'optimize', the WAL checkpoint), which nothing overlaps. The full `reindex` adds the mirror's hash "
            "comparison and the catch-up's listing of every file with its ctime (~1-2 s). A cold rebuild "
            "(`reindex --no-cache`) parses, tokenizes and embeds every card (~1,300 texts/s): the embedding bounds it."
        )
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
