"""`manage.py ingest --workers N`: forked processes, each taking whole users and projects.

Run as a user would, in subprocesses with their own database and store: the outcome
with two workers must be the outcome with one.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from facts.intake.turns import clean_turn
from memoryadmin.management.commands.ingest import _split
from tests.factories import fact_candidate

BASE_DIR = Path(__file__).resolve().parent.parent


def turn(user: str, thread: str, text: str, facts: list[dict[str, Any]], project: str = "") -> dict[str, Any]:
    return {
        "user_id": user,
        "agent_name": "coder",
        "thread_id": thread,
        "project_id": project,
        "messages": [{"role": "user", "content": text, "id": f"{thread}-u1"}],
        "model_output": {"facts": facts},
    }


def lines() -> list[str]:
    out: list[str] = []
    for n in range(12):
        user = f"user-{n % 4}"
        project = "shared" if n % 3 == 0 else ""
        text = f"I am on team {n % 5}. Our repo uses tool {n % 2}."
        facts = [fact_candidate("team", f"On team {n % 5}.", f"I am on team {n % 5}", "", category="context")]
        if project:  # every third line writes the same project key: order decides the winner
            facts.append(
                fact_candidate(
                    "repo_tool",
                    f"The repo uses tool {n % 2}.",
                    f"Our repo uses tool {n % 2}",
                    "",
                    category="context",
                    scope="project",
                )
            )
        line = turn(user, f"t{n}", text, facts, project)
        for f in line["model_output"]["facts"]:  # the message id depends on the thread
            f["evidence_message_id"] = f"t{n}-u1"
        out.append(json.dumps(line))
        if n == 5:
            out.append("{not json")
    out.append(json.dumps({"user_id": "x"}))
    return out


def ingest(tmp: Path, workers: int, path: Path) -> tuple[list[dict[str, Any]], list[tuple], int]:
    env = dict(
        os.environ,
        MEMORY_ROOT=str(tmp / "memory"),
        DATABASE_URL=f"sqlite:///{tmp / 'db.sqlite3'}",
        DJANGO_SETTINGS_MODULE="memoryadmin.settings",
        LOG_LEVEL="WARNING",
    )
    tmp.mkdir()
    manage = [sys.executable, str(BASE_DIR / "manage.py")]
    subprocess.run([*manage, "migrate", "-v0"], env=env, check=True, cwd=BASE_DIR)
    done = subprocess.run(
        [*manage, "ingest", str(path), "--json", f"--workers={workers}", "--batch-size=2"],
        env=env,
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    for outcome in printed:
        outcome.pop("run_id", None)
    with sqlite3.connect(tmp / "db.sqlite3") as db:
        cards = sorted(db.execute("SELECT user_id, project_id, key, content, status FROM facts_factcard"))
    return printed, cards, done.returncode


@pytest.mark.slow
def test_two_workers_record_what_one_records(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    path.write_text("\n".join(lines()) + "\n")
    one = ingest(tmp_path / "one", 1, path)
    two = ingest(tmp_path / "two", 2, path)
    assert two == one
    printed, cards, code = two
    assert code == 1  # two bad lines, reported in place
    assert [p.get("line") for p in printed].count(None) == 12
    assert [p["line"] for p in printed if "line" in p] == [7, 14]
    # The shared project's key ends with the last line that set it, as in file order.
    assert ("", "shared", "repo_tool", "The repo uses tool 1.", "active") in cards


def _clean(user: str, project: str = "") -> Any:
    return clean_turn(
        user_id=user, agent_name="a", thread_id="t", project_id=project, messages=[{"role": "user", "content": "x"}]
    )


def test_lines_of_one_user_or_one_project_go_to_one_worker() -> None:
    parsed: list[Any] = [
        (1, (_clean("ann"), {})),
        (2, (_clean("bob"), {})),
        (3, (_clean("cy", "p1"), {})),
        (4, ValueError("bad")),
        (5, (_clean("ann", "p1"), {})),  # joins ann and cy through p1
        (6, (_clean("dee"), {})),
    ]
    shares = _split(parsed, 2)
    assert sorted(map(sorted, shares)) == [[0, 2, 4], [1, 5]]
    assert _split(parsed, 1) == [[0, 1, 2, 4, 5]]
    assert len(_split(parsed, 8)) == 3  # never more workers than independent groups
