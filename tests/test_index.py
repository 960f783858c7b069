"""The FTS5 index follows the single write function and is rebuildable from the files."""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from facts.enums import CardStatus
from facts.storage import sqlitegen
from facts.storage.store import Bucket, Store
from facts.storage.writer import delete_card, save_card, update_card
from memoryadmin import rebuild
from retrieval import indexconn, indexdb, indexpaths, indexrows, indexwrite, reads
from retrieval.search import search
from tests.conftest import FIXED_NOW
from tests.conftest import reindex_check as _check

pytestmark = pytest.mark.django_db


def _rows() -> list[tuple]:
    conn = indexconn.connection()
    cards = conn.execute(f"SELECT {indexrows.COLUMNS} FROM cards ORDER BY id").fetchall()
    df = conn.execute("SELECT term, n FROM df ORDER BY term").fetchall()
    stats = conn.execute("SELECT name, value FROM stats ORDER BY name").fetchall()
    return [cards, df, stats]  # type: ignore[list-item]


def _ids() -> set[str]:
    return {row[0] for row in indexconn.connection().execute("SELECT id FROM cards")}


def _found(query: str, **scope: Any) -> list[str]:
    return [hit.id for hit in search(query, now=FIXED_NOW, **{"user_id": "alice", "agent_name": "coder", **scope})]


def test_it_indexes_a_card_when_it_is_written(make_card) -> None:
    card = save_card(make_card(content="用户偏好用中文解释技术问题"), actor="t")
    assert _ids() == {card.id}
    assert _found("中文") == [card.id]


def test_it_updates_a_changed_card_in_place(make_card) -> None:
    card = save_card(make_card(content="User prefers tabs"), actor="t")
    update_card(Bucket.of(card), card.id, lambda c: c.model_copy(update={"content": "User prefers spaces"}), actor="t")
    assert _found("tabs") == []
    assert _found("spaces") == [card.id]
    assert len(_ids()) == 1


def test_expired_superseded_and_deleted_cards_leave_the_index(make_card) -> None:
    expired = save_card(make_card(content="old expired fact"), actor="t")
    superseded = save_card(make_card(content="old superseded fact"), actor="t")
    deleted = save_card(make_card(content="old deleted fact"), actor="t")
    kept = save_card(make_card(content="old kept fact"), actor="t")
    save_card(expired.model_copy(update={"status": CardStatus.EXPIRED}), actor="t")
    save_card(superseded.model_copy(update={"status": CardStatus.SUPERSEDED, "superseded_by": kept.id}), actor="t")
    delete_card(deleted, actor="t")
    assert _ids() == {kept.id}
    assert _found("old fact") == [kept.id]


def test_a_card_past_its_expiry_date_is_never_found(make_card) -> None:
    card = save_card(make_card(content="temporary fact", expires_at=FIXED_NOW + timedelta(days=1)), actor="t")
    assert _found("temporary") == [card.id]
    assert search("temporary", user_id="alice", agent_name="coder", now=FIXED_NOW + timedelta(days=2)) == []


def _history(make_card) -> None:
    a = save_card(make_card(content="User prefers concise answers"), actor="t")
    b = save_card(make_card(content="用户正在学习 Rust 语言", user_id="bob"), actor="t")
    c = save_card(
        make_card(content="Project uses PostgreSQL 16", user_id=None, agent_name=None, project_id="p1"), actor="t"
    )
    save_card(make_card(content="User dislikes long meetings", agent_name="writer"), actor="t")
    update_card(
        Bucket.of(a), a.id, lambda x: x.model_copy(update={"content": "User prefers very concise answers"}), actor="t"
    )
    # Words go, words come, the length changes: the statistics move by the difference.
    update_card(
        Bucket.of(a),
        a.id,
        lambda x: x.model_copy(update={"content": "User wants terse replies, 用户 concise"}),
        actor="t",
    )
    save_card(b.model_copy(update={"status": CardStatus.EXPIRED}), actor="t")
    delete_card(c, actor="t")
    save_card(make_card(content="Project uses Django 5.2", user_id=None, agent_name=None, project_id="p1"), actor="t")


def test_a_rebuild_from_the_files_equals_the_incremental_index(make_card) -> None:
    _history(make_card)
    incremental = _rows()
    assert incremental[0], "the history left cards in the index"
    indexconn.connection().execute("DELETE FROM cards")
    call_command("reindex", "--no-progress", stdout=StringIO())
    assert _rows() == incremental


def test_a_deleted_index_is_rebuilt_in_the_background_and_never_read_as_empty(make_card, settings) -> None:
    card = save_card(make_card(content="User prefers dark mode"), actor="t")
    assert _found("dark mode") == [card.id]
    shutil.rmtree(indexpaths.index_path().parent)  # by hand, while this process holds a connection
    settings.MEMORY_INDEX_WAIT_SECONDS = 0
    with pytest.raises(indexdb.IndexUnavailable, match="missing: it is being rebuilt from the files"):
        _found("dark mode")
    indexconn.wait_for_rebuilds()
    assert _found("dark mode") == [card.id]
    assert indexpaths.index_path().is_symlink() and indexpaths.index_path().exists()


def test_a_reader_waits_a_moment_for_the_rebuild_it_started(make_card) -> None:
    card = save_card(make_card(content="User prefers light mode"), actor="t")
    indexconn.connection()
    indexconn.reset()
    indexpaths.index_path().unlink()
    assert _found("light mode") == [card.id]  # within MEMORY_INDEX_WAIT_SECONDS


def test_a_corrupt_index_file_is_replaced_by_a_new_generation(make_card) -> None:
    card = save_card(make_card(content="User prefers light mode"), actor="t")
    indexconn.connection()
    indexconn.reset()
    old = sqlitegen.target(indexpaths.index_path())
    assert old is not None and old != indexpaths.index_path()
    old.write_bytes(b"this is not a database" * 100)
    assert _found("light mode") == [card.id]
    new = sqlitegen.target(indexpaths.index_path())
    assert new is not None and new != old


def test_an_index_corrupted_under_an_open_connection_is_rebuilt(make_card) -> None:
    card = save_card(make_card(content="User prefers vim"), actor="t")
    indexconn.connection().execute("DROP TABLE cards")
    assert _found("vim") == [card.id]


def test_a_commit_made_while_the_index_is_rebuilt_is_in_the_new_one(make_card, settings) -> None:
    first = save_card(make_card(content="User prefers tea"), actor="t")
    indexconn.connection()
    indexconn.reset()
    indexpaths.index_path().unlink()
    settings.MEMORY_INDEX_WAIT_SECONDS = 0
    with pytest.raises(indexdb.IndexUnavailable):
        _found("tea")
    second = save_card(make_card(content="User prefers green tea"), actor="t")  # the hook finds no index
    indexconn.wait_for_rebuilds()
    assert sorted(_found("tea")) == sorted([first.id, second.id])


def test_the_connection_is_reused_within_a_thread(make_card) -> None:
    save_card(make_card(), actor="t")
    assert indexconn.connection() is indexconn.connection()


def test_a_failing_index_update_never_fails_the_write(make_card, monkeypatch, caplog) -> None:
    def broken(*args, **kwargs):
        raise sqlite3.OperationalError("disk I/O error")

    indexconn.connection()  # the index exists: the update itself fails
    monkeypatch.setattr(indexwrite, "apply", broken)
    card = save_card(make_card(content="User prefers emacs"), actor="t")
    assert card.revision == 1
    assert "search index update failed" in caplog.text


def test_updates_and_searches_use_indexed_lookups(make_card) -> None:
    save_card(make_card(), actor="t")
    conn = indexconn.connection()
    plan = " ".join(str(r) for r in conn.execute("EXPLAIN QUERY PLAN SELECT rid FROM cards WHERE id = ?", ("x",)))
    assert "USING INDEX" in plan or "USING COVERING INDEX" in plan
    assert reads._match(["rust"], ["u\x1falice\x1fcoder"]).startswith('scope : ("s')


def test_reindex_check_reports_index_drift(make_card, store: Store) -> None:
    missing = save_card(make_card(content="missing from the index"), actor="t")
    changed = save_card(make_card(content="changed by hand"), actor="t")
    save_card(make_card(content="in step"), actor="t")
    conn = indexconn.connection()
    conn.execute("DELETE FROM cards WHERE id = ?", (missing.id,))
    conn.execute("UPDATE cards SET sig = 'x' WHERE id = ?", (changed.id,))
    conn.execute(
        f"INSERT INTO cards ({indexrows.COLUMNS}) VALUES ({', '.join('?' * 19)})",
        ("fact_aaaaaaaaaaaa", *(["x"] * 14), None, None, None, 1),
    )
    code, report = _check()
    assert code == 1
    assert report["index"] == {"missing": [missing.id], "extra": ["fact_aaaaaaaaaaaa"], "changed": [changed.id]}
    assert report["mirror"] == {"missing": [], "extra": [], "changed": []}
    call_command("reindex", "--no-progress", stdout=StringIO())
    code, report = _check()
    assert code == 0 and report["index"] == {"missing": [], "extra": [], "changed": []}


def test_reindex_check_reports_a_missing_index_without_building_it(make_card) -> None:
    card = save_card(make_card(), actor="t")
    indexconn.connection()
    indexconn.reset()
    indexpaths.index_path().unlink()
    report = rebuild.check()
    assert report.parts["index"].missing == [card.id]
    assert not indexpaths.index_path().exists()


def test_reindex_reports_how_many_cards_it_indexed(make_card) -> None:
    for _ in range(3):
        save_card(make_card(), actor="t")
    out = StringIO()
    call_command("reindex", "--json", stdout=out)
    assert json.loads(out.getvalue())["indexed"] == 3


def test_both_files_commit_without_an_fsync_each(make_card) -> None:
    """The attached cache had SQLite's default (FULL): an fsync at every commit, most of
    a single-card update's time. Both are derived data: NORMAL."""
    save_card(make_card(), actor="t")
    conn = indexconn.connection()
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1
    assert conn.execute("PRAGMA vc.synchronous").fetchone()[0] == 1


def test_the_wal_is_checkpointed_once_writes_pause(make_card, monkeypatch: pytest.MonkeyPatch) -> None:
    from retrieval import indexdb

    monkeypatch.setattr(indexdb, "CHECKPOINT_BYTES", 1)
    monkeypatch.setattr(indexdb, "CHECKPOINT_EVERY", 1)
    monkeypatch.setattr(indexdb, "CHECKPOINT_IDLE_S", 0.3)
    checkpoints: list[float] = []
    real = indexdb._checkpoint
    monkeypatch.setattr(indexdb, "_checkpoint", lambda path: (checkpoints.append(time.monotonic()), real(path)))
    indexconn.connection()  # the index exists: the writes go to it
    started = time.monotonic()
    for n in range(5):  # a burst: none while it lasts
        save_card(make_card(content=f"fact number {n}"), actor="t")
        assert checkpoints == []
    last_write = time.monotonic()
    deadline = time.monotonic() + 5
    while not checkpoints and time.monotonic() < deadline:
        time.sleep(0.05)
    assert checkpoints and checkpoints[0] - last_write >= 0.2 and checkpoints[0] > started


def test_a_dashboard_page_reading_a_missing_index_says_so_with_503(make_card, settings, admin_client_) -> None:
    save_card(make_card(content="User prefers dark mode"), actor="t")
    indexconn.connection()
    indexconn.reset()
    shutil.rmtree(indexpaths.index_path().parent)
    settings.MEMORY_INDEX_WAIT_SECONDS = 0
    page = admin_client_.get("/search/", {"user": "alice", "agent": "coder", "q": "dark mode"})
    assert page.status_code == 503 and page["Retry-After"] == "5"
    assert "it is being rebuilt from the files" in page.content.decode()
    indexconn.wait_for_rebuilds()
