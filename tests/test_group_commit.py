"""Replayed turns in group commits (`run_replays`, `manage.py ingest --batch-size`).

A group commit writes several turns' cards in one batch and records their runs in one
transaction; what it records must be what one turn at a time records.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from facts.demo import DEMO_FILE
from facts.intake.turns import clean_turn
from facts.judging.pipeline import run_replays
from facts.mirror import mirror_drift
from facts.models import (
    Candidate,
    ExtractedMessage,
    ExtractionRun,
    FactCard,
    FactRevision,
    ProfileRevision,
    ProfileSection,
    Turn,
)
from facts.storage import atomic
from facts.storage.snapshots import snapshot
from facts.storage.store import get_store
from tests.factories import fact_candidate

pytestmark = pytest.mark.django_db


def turn(thread: str, text: str, facts: list[dict[str, Any]], *, user: str = "alice", msg: str = "u1") -> dict:
    return {
        "user_id": user,
        "agent_name": "coder",
        "thread_id": thread,
        "messages": [{"role": "user", "content": text, "id": msg}],
        "model_output": {"facts": facts},
    }


def ingest(path: Path, batch_size: int) -> list[dict[str, Any]]:
    out = io.StringIO()
    with contextlib.suppress(CommandError):
        call_command("ingest", str(path), "--json", f"--batch-size={batch_size}", stdout=out, stderr=io.StringIO())
    return [json.loads(line) for line in out.getvalue().splitlines()]


def outcome(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Everything a batch leaves behind, without the ids that differ between two runs."""
    return {
        "printed": [{k: v for k, v in r.items() if k != "run_id"} for r in results],
        "cards": sorted(
            FactCard.objects.values_list("user_id", "agent_name", "project_id", "key", "content", "status")
        ),
        "superseded_by_key": sorted(
            (c.key, FactCard.objects.get(pk=c.superseded_by).key) for c in FactCard.objects.filter(status="superseded")
        ),
        "candidates": sorted(
            Candidate.objects.values_list("kind", "key", "section", "verdict", "reasons", "review_state")
        ),
        "profiles": sorted(ProfileSection.objects.exclude(summary="").values_list("user_id", "name", "summary")),
        "extracted": sorted(ExtractedMessage.objects.values_list("user_id", "agent_name", "thread_id", "message_id")),
        "turns": sorted(Turn.objects.values_list("thread_id", "status")),
        "runs": sorted(ExtractionRun.objects.values_list("thread_id", "status")),
    }


def wipe(settings: Any, root: Path) -> None:
    models = (Candidate, ExtractedMessage, FactRevision, FactCard, ProfileRevision, ProfileSection, Turn, ExtractionRun)
    for model in models:
        model.objects.all().delete()
    root.mkdir()
    settings.MEMORY_ROOT = root


def test_the_demo_in_groups_records_what_it_records_one_turn_at_a_time(tmp_path: Path, settings: Any) -> None:
    # The demo has every reason code, summaries, a project, a correction that replaces a
    # key an earlier turn saved, and greetings-only turns that are skipped.
    alone = outcome(ingest(DEMO_FILE, 1))
    assert alone["cards"] and alone["superseded_by_key"] and alone["profiles"]
    wipe(settings, tmp_path / "second")
    grouped = outcome(ingest(DEMO_FILE, 16))
    assert grouped == alone
    # One difference, by design: a card saved and replaced within one group is written
    # once, in its final (superseded) state, so its history has one revision, not two.
    assert set(FactCard.objects.filter(status="superseded").values_list("revision", flat=True)) == {1}
    assert mirror_drift(snapshot(get_store())).clean


def test_a_later_turn_in_the_group_replaces_the_key_an_earlier_one_saved(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    lines = [
        turn("t1", "I use vim for everything.", [fact_candidate("editor", "Uses vim.", "I use vim")]),
        turn("t2", "I switched to emacs for good.", [fact_candidate("editor", "Uses emacs.", "I switched to emacs")]),
        turn(
            "t3", "I switched to emacs for good.", [fact_candidate("other", "Uses emacs.", "I switched to emacs")]
        ),  # duplicate content
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines))
    results = ingest(path, 16)
    assert [[c["verdict"] for c in r["candidates"]] for r in results] == [["accepted"], ["accepted"], ["rejected"]]
    assert results[2]["candidates"][0]["reasons"] == ["duplicate"]
    old, new = FactCard.objects.get(status="superseded"), FactCard.objects.get(status="active")
    assert (old.content, old.superseded_by, new.content) == ("Uses vim.", new.id, "Uses emacs.")
    # Each card's history names the run that wrote it.
    runs = {r.thread_id: r.pk for r in ExtractionRun.objects.all()}
    assert FactRevision.objects.get(fact_id=new.id).reason == f"run {runs['t2']}"
    assert FactRevision.objects.get(fact_id=old.id).reason == f"run {runs['t2']}"  # its final state: superseded
    assert get_store().read_card_at(get_store().root / old.path).status == "superseded"


def test_a_thread_that_comes_back_starts_a_new_group_so_no_message_is_extracted_twice() -> None:
    first = turn("t1", "I use vim for everything.", [fact_candidate("editor", "Uses vim.", "I use vim")])
    again = turn("t1", "I use vim for everything.", [fact_candidate("editor2", "Really uses vim.", "I use vim")])
    cleaned = [
        (clean_turn(**{k: v for k, v in t.items() if k != "model_output"}), t["model_output"]) for t in (first, again)
    ]
    results = run_replays(cleaned, batch_size=16)
    # The repeated message u1 was fed to the first run only: the second has no user words left.
    assert [r.status for r in results] == ["succeeded", "skipped"]
    assert ExtractedMessage.objects.filter(thread_id="t1", message_id="u1").count() == 1
    assert FactCard.objects.count() == 1


def test_replays_need_their_model_output() -> None:
    cleaned = clean_turn(
        user_id="alice", agent_name="coder", thread_id="t", messages=[{"role": "user", "content": "x"}]
    )
    with pytest.raises(TypeError, match="model output"):
        run_replays([(cleaned, None)])


def test_a_disk_failure_loses_the_whole_group_and_leaves_no_half_recorded_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.jsonl"
    lines = [
        turn(f"t{i}", f"I like tool {i}.", [fact_candidate(f"tool_{i}", f"Likes tool {i}.", f"I like tool {i}")])
        for i in range(3)
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines))
    real = atomic._write_temp
    calls = {"n": 0}

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(atomic, "_write_temp", failing)
    with pytest.raises(OSError, match="No space"):
        call_command("ingest", str(path), "--json", stdout=io.StringIO(), stderr=io.StringIO())
    # No run of the group claims anything: no candidates, no extracted ids, turns not done.
    assert not Candidate.objects.exists() and not ExtractedMessage.objects.exists()
    assert set(Turn.objects.values_list("status", flat=True)) == {"processing"}
    # The cards that did reach the disk are mirrored (nothing on disk is unknown to the DB).
    assert FactCard.objects.count() == 2
    assert mirror_drift(snapshot(get_store())).clean

    # Run again: the turn whose card never landed saves it now; the other two find their
    # cards already there (duplicates), so no fact is saved twice.
    monkeypatch.setattr(atomic, "_write_temp", real)
    results = ingest(path, 16)
    verdicts = [(c["verdict"], c["reasons"]) for r in results for c in r["candidates"]]
    assert sorted(verdicts) == [("accepted", []), ("rejected", ["duplicate"]), ("rejected", ["duplicate"])]
    assert FactCard.objects.filter(status="active").count() == 3


def test_batch_size_must_be_positive(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(turn("t1", "I use vim.", [])))
    with pytest.raises(CommandError, match="batch-size"):
        call_command("ingest", str(path), "--batch-size=0", stdout=io.StringIO(), stderr=io.StringIO())
