"""Erasure as an operator runs it: `manage.py erase` in its own process, on a real
database file and MEMORY_ROOT, then a byte search (`grep -a`) of every file.

A word unique to the erased user must survive nowhere: not in a card file, not in the
SQLite database (free pages, the slack of pages, the WAL), not in the FTS5 segments of
the search index. Killed at any point (SIGKILL), a rerun finishes the job.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.erasure_seed import XENA_WORDS, YURI_WORDS, turns
from tests.helpers_reliability.procs import Env, on_postgres, report_numbers

THREAD1 = [v for k, v in XENA_WORDS.items() if k.startswith("thread1")]


def seed(env: Env, tmp: Path) -> None:
    lines = tmp / "turns.jsonl"
    lines.write_text("\n".join(json.dumps(t, ensure_ascii=False) for t in turns()) + "\n", encoding="utf-8")
    env.manage("ingest", str(lines))
    # Searches and context reads: the rate-limit database and the usage counters exist too.
    env.manage("memory_search", "--user", "xena", "--agent", "coder", XENA_WORDS["thread2_fact"])


def db_files(env: Env) -> list[Path]:
    url = env.vars["DATABASE_URL"]
    if not url.startswith("sqlite:///"):
        return []
    db = Path(url.removeprefix("sqlite:///"))
    return [p for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), Path(f"{db}-journal")) if p.exists()]


def grep(env: Env, words: list[str]) -> dict[str, list[str]]:
    """Which files hold which word, byte for byte (UTF-8), like `grep -a -l`."""
    found: dict[str, list[str]] = {}
    files = [p for p in env.root.rglob("*") if p.is_file()] + db_files(env)
    for path in files:
        data = path.read_bytes()
        for word in words:
            if word.encode() in data:
                found.setdefault(word, []).append(str(path))
    return found


def rows_of(env: Env, user: str) -> dict[str, int]:
    code = f"""
import json
from facts.models import Candidate, ExtractedMessage, ExtractionRun, FactCard, ProfileRevision, ProfileSection, Turn
from facts.models import FactRevision
print(json.dumps({{m.__name__: m.objects.filter(user_id={user!r}).count() for m in
    (Candidate, ExtractedMessage, ExtractionRun, FactCard, ProfileRevision, ProfileSection, Turn)}}
    | {{"project_cards": FactCard.objects.filter(user_id="", content__contains={XENA_WORDS["thread1_project"]!r}).count()}}))
"""
    return json.loads(env.django(code))


def search_ids(env: Env, user: str, word: str, project: str | None = None) -> list[str]:
    extra = ["--project", project] if project else []
    out = env.manage("memory_search", "--user", user, "--agent", "coder", *extra, "--json", word).stdout
    return [hit["id"] for hit in json.loads(out)]


def test_it_leaves_no_byte_of_an_erased_user_anywhere(proc_env: Env, tmp_path: Path) -> None:
    seed(proc_env, tmp_path)
    words = list(XENA_WORDS.values())
    before = grep(proc_env, words)
    # They really are in the files and the database first (on PostgreSQL only the
    # files can be searched here; its rows are checked by rows_of).
    assert set(before) == set(words) if not on_postgres() else XENA_WORDS["thread1_fact"] in before

    done = proc_env.manage("erase", "--user", "xena", "--yes")

    assert "cards: 2" in done.stdout
    assert grep(proc_env, words) == {}
    assert not any(rows_of(proc_env, "xena").values())
    assert set(grep(proc_env, list(YURI_WORDS.values()))) == set(YURI_WORDS.values())
    assert search_ids(proc_env, "yuri", YURI_WORDS["fact"])
    assert search_ids(proc_env, "yuri", YURI_WORDS["project"], project="p1")
    assert proc_env.check_drift()[0] == 0
    report_numbers("erase_user_bytes", files=len(list(proc_env.root.rglob("*"))), words=len(words), left=0)


def test_it_forgets_one_conversation_to_the_byte_and_keeps_the_others(proc_env: Env, tmp_path: Path) -> None:
    seed(proc_env, tmp_path)

    proc_env.manage("erase", "--user", "xena", "--agent", "coder", "--thread", "x-t1", "--yes")

    assert grep(proc_env, THREAD1) == {}
    assert XENA_WORDS["thread2_fact"] in grep(proc_env, [XENA_WORDS["thread2_fact"]])
    assert search_ids(proc_env, "xena", XENA_WORDS["thread2_fact"])
    assert rows_of(proc_env, "xena")["Turn"] == 1
    assert proc_env.check_drift()[0] == 0


def test_it_changes_no_byte_in_a_dry_run(proc_env: Env, tmp_path: Path) -> None:
    seed(proc_env, tmp_path)
    before = {p: p.read_bytes() for p in proc_env.root.rglob("*") if p.is_file() and ".retrieval" not in p.parts}

    out = proc_env.manage("erase", "--user", "xena").stdout

    assert "Dry run" in out and "cards: 2" in out
    after = {p: p.read_bytes() for p in proc_env.root.rglob("*") if p.is_file() and ".retrieval" not in p.parts}
    assert after == before
    assert rows_of(proc_env, "xena")["Turn"] == 2


def late_turn(env: Env) -> str:
    """A turn of the user being erased, from another process: 'refused' or 'accepted'."""
    return env.django(
        "from facts.intake.queue import record_turn\nfrom facts.erasure.guard import ErasureInProgress\n"
        "try:\n record_turn(user_id='xena', agent_name='coder', thread_id='late', "
        "messages=[{'role': 'user', 'content': 'latecomerwords'}])\n print('accepted')\n"
        "except ErasureInProgress:\n print('refused')\n"
    ).strip()


def test_it_finishes_an_erasure_killed_at_every_step_by_a_rerun(proc_env: Env, tmp_path: Path) -> None:
    seed(proc_env, tmp_path)
    words = list(XENA_WORDS.values())
    killed = []
    # Killed at each step in turn, each run resuming the unfinished erasure.
    for point in ("after_marker", "during_cards", "after_files", "after_rows", "after_bytes"):
        env = Env({**proc_env.vars, "MEMORY_ERASE_FAILPOINT": point}, proc_env.root)
        done = env.manage("erase", "--user", "xena", "--yes", check=False)
        killed.append(point)
        assert done.returncode == -signal.SIGKILL, (point, done.stderr[-2000:])
        # While it is unfinished, a turn of that user is refused, from any process.
        assert late_turn(proc_env) == "refused", point

    done = proc_env.manage("erase", "--user", "xena", "--yes")

    assert "(resumed)" in done.stdout
    assert grep(proc_env, [*words, "latecomerwords"]) == {}
    assert not any(rows_of(proc_env, "xena").values())
    assert search_ids(proc_env, "yuri", YURI_WORDS["fact"])
    assert proc_env.check_drift()[0] == 0
    assert late_turn(proc_env) == "accepted"  # a finished erasure refuses nothing
    report_numbers("erase_killed_at_steps", kills=len(killed), points=killed)


def test_it_finishes_an_erasure_killed_at_random_moments_by_a_rerun(proc_env: Env, tmp_path: Path) -> None:
    seed(proc_env, tmp_path)
    started = time.monotonic()
    proc_env.manage("erase", "--user", "xena")  # a dry run: how long a run takes here
    span = time.monotonic() - started
    kills, rc = 0, None
    while rc != 0 and kills < 8:
        proc = proc_env.popen("manage.py", "erase", "--user", "xena", "--yes", "--skip-checks")
        time.sleep(random.uniform(0.6 * span, 1.3 * span))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        rc = proc.wait(timeout=120)
    if rc != 0:
        proc_env.manage("erase", "--user", "xena", "--yes")

    assert grep(proc_env, list(XENA_WORDS.values())) == {}
    assert not any(rows_of(proc_env, "xena").values())
    assert proc_env.check_drift()[0] == 0
    report_numbers("erase_killed_at_random", kills=kills, run_s=round(span, 2))


@pytest.mark.skipif(not on_postgres(), reason="PostgreSQL only")
def test_it_removes_the_rows_on_postgresql(proc_env: Env, tmp_path: Path) -> None:
    seed(proc_env, tmp_path)
    proc_env.manage("erase", "--user", "xena", "--yes")
    assert not any(rows_of(proc_env, "xena").values())
    assert grep(proc_env, list(XENA_WORDS.values())) == {}


POSTER = """
import json, sys, time
from facts.erasure.guard import ErasureInProgress
from facts.judging.pipeline import run_turns_now
from tests.erasure_seed import turns
base = turns()[1]
n, accepted, refused = 0, 0, 0
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:
    n += 1
    word = f"racerword{n:04d}"
    turn = dict(base, thread_id=f"race-{n}", messages=[{"role": "user", "content": f"I drink {word} tea.", "id": "m"}],
                model_output={"facts": [dict(base["model_output"]["facts"][0], key=f"k{n}",
                    content=f"User drinks {word} tea.", evidence_text=word, evidence_message_id="m")]})
    try:
        run_turns_now(**turn)
        accepted += 1
    except ErasureInProgress:
        refused += 1
print(json.dumps({"attempts": n, "accepted": accepted, "refused": refused}))
"""


def test_it_refuses_or_erases_turns_racing_an_erasure_never_half_keeps_them(proc_env: Env, tmp_path: Path) -> None:
    seed(proc_env, tmp_path)
    script = tmp_path / "poster.py"
    script.write_text("import django; django.setup()\n" + POSTER, encoding="utf-8")
    poster = proc_env.popen(str(script), "12", stdout=subprocess.PIPE)
    time.sleep(4)  # the poster is writing cards when the erasure begins
    proc_env.manage("erase", "--user", "xena", "--yes")
    out, _ = poster.communicate(timeout=120)
    figures = json.loads(out.strip().splitlines()[-1])

    # Everything of xena still there was accepted after the erasure had finished: no
    # turn, run or candidate from before, no card whose run was erased (card times
    # are stored to the second, so cards are matched by their run).
    left = json.loads(
        proc_env.django(
            "import json\nfrom facts.models import Erasure, FactCard, Turn, ExtractionRun, Candidate\n"
            "done = Erasure.objects.get().finished_at\n"
            "print(json.dumps({'old_turns': Turn.objects.filter(user_id='xena', received_at__lte=done).count(),"
            " 'old_runs': ExtractionRun.objects.filter(user_id='xena', started_at__lte=done).count(),"
            " 'old_cards': FactCard.objects.filter(user_id='xena').exclude(source_run_id__in="
            "  [str(pk) for pk in ExtractionRun.objects.values_list('pk', flat=True)]).count(),"
            " 'old_candidates': Candidate.objects.filter(user_id='xena', created_at__lte=done).count(),"
            " 'turns_after': Turn.objects.filter(user_id='xena').count()}))"
        )
    )
    assert left["old_turns"] == left["old_runs"] == left["old_cards"] == left["old_candidates"] == 0, left
    assert figures["accepted"] > 0
    assert proc_env.check_drift()[0] == 0
    report_numbers("erase_racing_turns", **figures, kept_after_erasure=left["turns_after"])
