"""The file store: formats, round trips, atomic writes."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from facts.storage.atomic import atomic_write, atomic_write_many
from facts.storage.cardfile import Card, dump_card, parse_card
from facts.storage.errors import CardParseError
from facts.storage.ids import shard
from facts.storage.profilefile import Profile, Section, dump_profile, parse_profile
from facts.storage.store import Bucket, Store


def test_it_round_trips_a_card_through_its_file(store: Store, make_card) -> None:
    card = make_card(content="用户偏好用中文解释技术问题。", expires_at=datetime(2027, 1, 1, tzinfo=UTC))
    path = store.write_card(card)
    assert store.read_card(Bucket.of(card), card.id) == card
    assert parse_card(path.read_text(), path) == card


def test_it_writes_byte_identical_files_for_the_same_card(store: Store, make_card) -> None:
    card = make_card()
    first = dump_card(card)
    assert dump_card(parse_card(first, Path("x.md"))) == first


def test_it_lays_cards_out_as_the_design_says(store: Store, make_card, memory_root: Path) -> None:
    card = make_card(user_id="alice", agent_name="coder")
    path = store.write_card(card)
    assert path == memory_root / "users/alice/agents/coder/facts" / shard(card.id) / f"{card.id}.md"
    assert len(shard(card.id)) == 2


def test_it_puts_cards_without_agent_in_the_default_bucket(store: Store, make_card, memory_root: Path) -> None:
    card = make_card(agent_name=None)
    assert "/agents/__default__/facts/" in store.write_card(card).as_posix()


def test_it_puts_project_cards_under_the_project(store: Store, make_card, memory_root: Path) -> None:
    card = make_card(user_id=None, agent_name=None, project_id="shop-backend")
    path = store.write_card(card)
    assert path.relative_to(memory_root).parts[:3] == ("projects", "shop-backend", "facts")


def test_card_files_are_hand_editable_markdown(store: Store, make_card) -> None:
    card = make_card(content="User prefers *short* answers.")
    text = store.write_card(card).read_text()
    assert text.startswith("---\n")
    assert "key: " in text and "confidence: 0.9" in text
    assert text.rstrip().endswith("User prefers *short* answers.")


def test_it_reports_a_broken_card_with_its_path(tmp_path: Path) -> None:
    bad = tmp_path / "fact_000000000000.md"
    bad.write_text("---\nid: [unclosed\n---\nbody\n")
    with pytest.raises(CardParseError) as info:
        Store(tmp_path).read_card_at(bad)
    assert str(bad) in str(info.value)


def test_it_rejects_a_card_with_an_out_of_range_confidence(make_card) -> None:
    text = dump_card(make_card()).replace("confidence: 0.9", "confidence: 1.2")
    with pytest.raises(CardParseError, match="confidence"):
        parse_card(text, Path("x.md"))


def test_it_round_trips_a_profile(store: Store) -> None:
    profile = Profile(user_id="alice@example.com")
    profile.set_section(
        "workContext", Section(summary="主要做 Python 后端开发", updated_at=datetime(2026, 1, 1, tzinfo=UTC))
    )
    store.write_profile(profile)
    again = store.read_profile("alice@example.com")
    assert again == profile
    assert parse_profile(dump_profile(again), Path("m.json")) == profile
    data = store.profile_path("alice@example.com").read_text()
    for key in ("version", "revision", "updated_at", "workContext", "topOfMind", "recentMonths", "longTermBackground"):
        assert key in data


def test_a_missing_profile_reads_as_empty(store: Store) -> None:
    profile = store.read_profile("nobody")
    assert profile.revision == 0
    assert profile.section("topOfMind").summary == ""


def test_an_interrupted_write_leaves_the_old_file_intact(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "shard"
    target = folder / "card.md"
    atomic_write(target, "old contents\n")

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("power cut before os.replace")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, "new contents\n")
    assert target.read_text() == "old contents\n"
    assert [p.name for p in folder.iterdir()] == ["card.md"], "the temp file is cleaned up"


def test_a_batch_write_reports_each_file_and_keeps_the_last_version_of_a_repeated_path(tmp_path: Path) -> None:
    waited: list[bool] = []
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    items = [
        (tmp_path / "x" / "one.md", "1\n"),
        (tmp_path / "y" / "two.md", "2\n"),
        (blocked / "three.md", "3\n"),  # its folder cannot be created
    ]
    errors = atomic_write_many(items, while_waiting=lambda: waited.append(True))
    assert [e is None for e in errors] == [True, True, False]
    assert (tmp_path / "x" / "one.md").read_text() == "1\n" and (tmp_path / "y" / "two.md").read_text() == "2\n"
    assert waited == [True]
    same = tmp_path / "x" / "same.md"
    assert atomic_write_many([(same, "first\n"), (same, "second\n")]) == [None, None]
    assert same.read_text() == "second\n"
    assert not list(tmp_path.rglob(".tmp-*")), "no temp file is left behind"


def test_a_batch_write_waits_for_its_files_even_when_the_wait_callback_fails(tmp_path: Path) -> None:
    def boom() -> None:
        raise RuntimeError("callback failed")

    items = [(tmp_path / f"{i}.md", f"{i}\n") for i in range(4)]
    with pytest.raises(RuntimeError):
        atomic_write_many(items, while_waiting=boom)
    assert [path.read_text() for path, _ in items] == ["0\n", "1\n", "2\n", "3\n"]


def test_card_files_skip_temp_files(store: Store, make_card) -> None:
    card = make_card()
    path = store.write_card(card)
    (path.parent / ".tmp-abc.md").write_text("half written")
    assert list(store.card_files()) == [path]


def test_a_card_needs_a_valid_id(make_card) -> None:
    with pytest.raises(ValueError):
        make_card(id="../../etc/passwd")
    assert isinstance(make_card(), Card)


def test_a_batch_fsyncs_each_folder_once_and_each_new_folders_parent_once(tmp_path: Path, monkeypatch) -> None:
    from facts.storage import atomic

    synced: list[Path] = []
    real = atomic.fsync_dir

    def counting(path: Path) -> None:
        synced.append(Path(path))
        real(path)

    monkeypatch.setattr(atomic, "fsync_dir", counting)
    facts = tmp_path / "facts"
    facts.mkdir()
    items = [(facts / shard_name / f"{i}.md", f"{i}\n") for i, shard_name in enumerate(["aa", "bb", "cc", "aa"])]
    assert atomic_write_many(items) == [None] * 4
    assert sorted(synced) == [facts, facts / "aa", facts / "bb", facts / "cc"]
    assert [path.read_text() for path, _ in items] == ["0\n", "1\n", "2\n", "3\n"]
