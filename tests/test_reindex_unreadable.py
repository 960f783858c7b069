"""An unreadable card is never silent: `reindex --check` and `reindex` exit 2 naming it
(relative to MEMORY_ROOT), `reindex` still rebuilds the rest, the index console shows it."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from facts.models import FactCard
from facts.storage.store import Store
from facts.storage.writer import save_card
from memoryadmin.models import DriftCheck
from retrieval.search import search

pytestmark = pytest.mark.django_db

BROKEN = "---\nid: [oops\n---\nnot yaml\n"


def _reindex(*args: str) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("reindex", "--no-progress", *args, stdout=out, stderr=err)
        code = 0
    except CommandError as exc:
        code = exc.returncode
        err.write(str(exc))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def hand_broken(store: Store, make_card) -> tuple[str, str]:
    """A good card and, beside it, a card file broken by hand that the mirror never saw:
    nothing but the check can tell it is missing from context and search."""
    good = save_card(make_card(content="User prefers tabs."), actor="t")
    other = make_card(content="User prefers dark mode.")
    path = store.card_path(other)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(BROKEN)
    return good.id, store.relative(path)


def test_check_exits_2_and_names_the_unreadable_card(hand_broken: tuple[str, str], memory_root: Path) -> None:
    _, rel = hand_broken
    assert _reindex()[0] == 2  # the mirror and index now hold everything readable
    code, out, err = _reindex("--check")
    assert code == 2
    assert f"unreadable {rel}:" in out
    assert str(memory_root) not in out + err, "paths are relative to MEMORY_ROOT"
    assert "1 memory file cannot be read" in err


def test_check_json_is_not_clean_and_lists_the_paths(hand_broken: tuple[str, str]) -> None:
    _, rel = hand_broken
    _reindex()
    code, out, _ = _reindex("--check", "--json")
    report = json.loads(out)
    assert code == 2
    assert report["clean"] is False
    assert report["in_step"] is True
    assert [u["path"] for u in report["unreadable"]] == [rel]


def test_reindex_rebuilds_the_rest_then_exits_2_naming_it(hand_broken: tuple[str, str]) -> None:
    good, rel = hand_broken
    FactCard.objects.all().delete()
    code, out, err = _reindex()
    assert code == 2
    assert "Rebuilt from the files" in out
    assert f"skipped {rel}:" in err
    assert list(FactCard.objects.values_list("id", flat=True)) == [good]
    assert [hit.id for hit in search("tabs", user_id="alice", agent_name="coder")] == [good]


def test_reindex_json_reports_the_unreadable_and_exits_2(hand_broken: tuple[str, str]) -> None:
    _, rel = hand_broken
    code, out, _ = _reindex("--json")
    assert code == 2
    assert [u["path"] for u in json.loads(out)["unreadable"]] == [rel]


def test_drift_without_unreadable_files_still_exits_1(store: Store, make_card) -> None:
    card = save_card(make_card(), actor="t")
    store.card_path(card).unlink()
    assert _reindex("--check")[0] == 1


def test_a_clean_store_exits_0_both_ways(make_card) -> None:
    save_card(make_card(), actor="t")
    assert _reindex()[0] == 0
    assert _reindex("--check")[0] == 0


def test_the_index_console_shows_the_unreadable_card(hand_broken: tuple[str, str], reviewer_client: Client) -> None:
    _, rel = hand_broken
    reviewer_client.post("/index/check/")
    check = DriftCheck.objects.latest("created_at")
    assert not check.clean
    page = reviewer_client.get("/index/").content.decode()
    assert rel in page
    assert "1 unreadable" in page
    overview = reviewer_client.get("/").content.decode()
    assert "1 unreadable" in overview


def test_a_dashboard_rebuild_shows_the_unreadable_card(hand_broken: tuple[str, str], reviewer_client: Client) -> None:
    _, rel = hand_broken
    response = reviewer_client.post("/index/rebuild/", {"reason": "check"})
    page = reviewer_client.get(response["Location"]).content.decode()
    assert "Unreadable files (1)" in page and rel in page
    console = reviewer_client.get("/index/").content.decode()
    assert "1 unreadable" in console
