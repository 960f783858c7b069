"""bench_hybrid's serving figures come from a process that only serves (issue 19's
RSS target: the bench's own query generator once added ~75 MB to the figure)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.mark.slow
def test_it_measures_search_and_rss_in_a_process_that_only_serves(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import corpus
    finally:
        sys.path.remove(str(BENCH))
    root = tmp_path / "corpus"
    (root / "memory").mkdir(parents=True)
    (root / "var").mkdir()
    queries = {
        "short": [["time zone", "user0001", "coder"]],
        "question": [["用户的日志在哪里", "user0001", "coder"]],
        "statement": [["The user wants logs kept for a week.", "user0001", "coder"]],
        "heavy": [["部署", corpus.HEAVY_USER, corpus.HEAVY_AGENT]],
    }
    file = tmp_path / "queries.json"
    file.write_text(json.dumps(queries))
    env = {**corpus.django_env(root), "MEMORY_EMBEDDINGS": "on"}
    out = subprocess.run(
        [sys.executable, str(BENCH / "bench_hybrid.py"), "--serve", str(file)],
        env=env,
        cwd=BENCH.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    names = ("search_short", "search_question", "search_statement", "search_heavy", "search_question_repeat")
    assert {name: figures[name]["n"] for name in names} == dict.fromkeys(names, 1)
    # Each set says how long its queries are, in the model's tokens.
    assert "hybrid search, 1 questions (" in out.stdout and " tok)" in out.stdout
    # The model, the segmenter and cl100k are in; the generator's vocabularies are not.
    assert 150 < figures["warm_rss_mb"] <= figures["serving_rss_mb"] < 300  # issue 39
    assert 0 < figures["serving_uss_mb"] <= figures["serving_pss_mb"] <= figures["serving_rss_mb"]
    assert "serving process RSS" in out.stdout
