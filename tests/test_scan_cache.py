"""The scan cache (issue 23): a rebuild reads and hashes every card file, but parses and
tokenizes only the files it has not seen; ``--check`` compares every entry with a fresh
parse, ``--no-cache`` ignores it, and nothing of a removed card stays in it."""

from __future__ import annotations

import marshal
import os

import pytest

from facts.storage import scan, snapshots
from facts.storage.store import Store
from facts.storage.writer import delete_card, save_card
from retrieval import derived, indexconn, indexrows
from retrieval.search import search
from tests.conftest import FIXED_NOW
from tests.conftest import reindex_check as _check
from tests.conftest import reindex_quietly as _reindex

pytestmark = pytest.mark.django_db


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The card files the scan parses from now on (relative paths)."""
    seen: list[str] = []
    parse = scan._parse

    def counting(root: str, rel: str, text: bytes, digest: str) -> tuple[scan.Scanned, bool]:
        seen.append(rel)
        return parse(root, rel, text, digest)

    monkeypatch.setattr(scan, "_parse", counting)
    return seen


def _found(query: str) -> list[str]:
    return [hit.id for hit in search(query, user_id="alice", agent_name="coder", now=FIXED_NOW)]


def _entries() -> dict[str, tuple]:
    rows = indexconn.connection().execute("SELECT fact_id, entry FROM vc.scans").fetchall()
    return {fact_id: marshal.loads(entry) for fact_id, entry in rows}


def test_a_second_rebuild_parses_no_card_it_has_seen(make_card, store: Store, parsed: list[str]) -> None:
    cards = [save_card(make_card(content=f"Deploys service number {n} on Fridays."), actor="t") for n in range(3)]
    expired = save_card(make_card(content="Used to live in Lyon.", status="expired"), actor="t")
    parsed.clear()
    _reindex()  # the first rebuild parses everything and remembers it
    assert len(parsed) == 4
    parsed.clear()

    _reindex()

    assert parsed == []
    assert sorted(_entries()) == sorted([c.id for c in cards] + [expired.id])
    assert _entries()[expired.id][1] is None  # known, not indexed
    assert _found("service") and _check()[0] == 0


def test_what_the_cache_gives_is_what_parsing_gives(make_card, store: Store) -> None:
    for n in range(5):
        save_card(make_card(content=f"Keeps note {n} in 时区 UTC+8.", confidence=0.5 + n / 20), actor="t")
    _reindex()
    from_cache = snapshots.snapshot(store)
    with derived.mode("bypass"):
        parsed_again = snapshots.snapshot(store)
    assert all(item.cached for item in from_cache.cards.values())
    assert not any(item.cached for item in parsed_again.cards.values())
    for fact_id, item in parsed_again.cards.items():
        hit = from_cache.cards[fact_id]
        assert (hit.digest, hit.ident, hit.extra[indexrows.SCAN_EXTRA].row) == (
            item.digest,
            item.ident,
            item.extra[indexrows.SCAN_EXTRA].row,
        )
        # The card itself is parsed from the text on first use, and is the same.
        assert hit.card == item.card


def test_a_hand_edit_is_parsed_again_and_its_old_entry_goes(make_card, store: Store, parsed: list[str]) -> None:
    card = save_card(make_card(content="Prefers tabs."), actor="t")
    other = save_card(make_card(content="Drinks coffee black."), actor="t")
    _reindex()
    parsed.clear()
    store.write_card(card.model_copy(update={"content": "Prefers spaces, four of them."}))

    _reindex()

    # Only the edited file (the catch-up reads it again: recording the hand edit rewrote it).
    assert set(parsed) == {store.relative(store.card_path(card))}
    assert _found("spaces") == [card.id] and _found("tabs") == []
    # Recording the hand edit wrote the file again (a new revision), which drops the
    # card's entries; the next rebuild parses that file once more and remembers it.
    assert card.id not in _entries() and other.id in _entries()
    parsed.clear()
    _reindex()
    assert parsed == [store.relative(store.card_path(card))]
    assert _entries()[card.id][1][indexrows.CONTENT] == "Prefers spaces, four of them."


def test_the_parallel_scan_uses_it(make_card, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan, "_PARALLEL_WALK_DIRS", 1)
    monkeypatch.setattr(scan, "_PARALLEL_PARSE_CARDS", 1)
    for n in range(6):
        save_card(make_card(user_id=f"user{n}", content=f"Works on project {n}."), actor="t")
    _reindex()
    scanned = list(scan.scan_cards(store, workers=2))
    assert len(scanned) == 6 and all(item.cached for item in scanned)
    assert {item.ident[0] for item in scanned} == {item.card.id for item in scanned}


def test_a_setting_that_changes_the_rows_makes_every_entry_a_miss(
    make_card, settings, parsed: list[str], embeddings: None
) -> None:
    save_card(make_card(content="Deploys on Fridays."), actor="t")
    _reindex()
    parsed.clear()
    settings.MEMORY_EMBEDDINGS = False  # rows name no vectors now
    _reindex()
    assert len(parsed) == 1
    assert _check()[0] == 0


def test_check_reports_a_tampered_entry_and_no_cache_repairs_it(make_card) -> None:
    card = save_card(make_card(content="Writes backend services in Go."), actor="t")
    save_card(make_card(content="Drinks coffee black."), actor="t")
    _reindex()
    conn = indexconn.connection()
    ident, row = _entries()[card.id]
    forged = marshal.dumps(
        (ident, (*row[: indexrows.CONTENT], "Writes backend services in Rust.", *row[indexrows.CONTENT + 1 :]))
    )
    conn.execute("UPDATE vc.scans SET entry = ? WHERE fact_id = ?", (forged, card.id))

    code, report = _check()

    assert code == 1 and report["cache"]["changed"] == [card.id]
    _reindex("--no-cache")
    assert _check()[0] == 0
    assert _entries()[card.id][1][indexrows.CONTENT] == "Writes backend services in Go."


def test_a_damaged_entry_is_a_miss_not_a_failure(make_card, parsed: list[str]) -> None:
    card = save_card(make_card(content="Writes backend services in Go."), actor="t")
    _reindex()
    indexconn.connection().execute("UPDATE vc.scans SET entry = x'00ff' WHERE fact_id = ?", (card.id,))
    parsed.clear()
    _reindex()
    assert len(parsed) == 1 and _found("backend") == [card.id]


def test_removing_a_card_leaves_none_of_its_text_in_the_scan_cache(make_card, store: Store) -> None:
    card = save_card(make_card(content="Secret project codename Bluebird."), actor="t")
    keep = save_card(make_card(content="Prefers tabs."), actor="t")
    _reindex()
    assert card.id in _entries()

    delete_card(card, actor="t")

    assert list(_entries()) == [keep.id]
    blobs = b"".join(entry for (entry,) in indexconn.connection().execute("SELECT entry FROM vc.scans"))
    assert b"Bluebird" not in blobs and b"bluebird" not in blobs


def test_an_entry_no_file_has_goes_with_the_next_rebuild(make_card, store: Store) -> None:
    card = save_card(make_card(content="Secret project codename Bluebird."), actor="t")
    _reindex()
    os.unlink(store.card_path(card))  # gone by hand: no write told the index
    _reindex()
    assert _entries() == {}
