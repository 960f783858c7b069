"""Files written by an earlier version read and write back byte for byte.

The files under tests/data/file_format were written by `manage.py demo` (and a
reviewer's profile edit) before the store was split into modules and `Source` and
`SectionSource` became one model (`facts.storage.cardfile.Source`): memory on disk must not
change with the code.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from facts.storage.cardfile import dump_card, parse_card
from facts.storage.profilefile import dump_profile, parse_profile
from facts.storage.store import Bucket, Store

DATA = Path(__file__).parent / "data" / "file_format"
CARDS = ["superseded_card.md", "confirmed_card.md", "project_card.md"]


@pytest.mark.parametrize("name", CARDS)
def test_it_writes_an_old_card_back_byte_for_byte(name: str, tmp_path: Path) -> None:
    text = (DATA / name).read_text(encoding="utf-8")
    card = parse_card(text, DATA / name)
    assert dump_card(card) == text
    store = Store(tmp_path)
    path = store.write_card(card)
    assert path.read_text(encoding="utf-8") == text
    assert store.read_card(Bucket.of(card), card.id) == card


def test_it_writes_an_old_profile_back_byte_for_byte(tmp_path: Path) -> None:
    text = (DATA / "memory.json").read_text(encoding="utf-8")
    profile = parse_profile(text, DATA / "memory.json")
    assert dump_profile(profile) == text
    store = Store(tmp_path)
    path = store.write_profile(profile)
    assert path.read_text(encoding="utf-8") == text
    assert store.read_profile(profile.user_id) == profile


def test_it_keeps_who_edited_a_profile_section_and_where_a_summary_came_from() -> None:
    profile = parse_profile((DATA / "memory.json").read_text(encoding="utf-8"), DATA / "memory.json")
    edited = profile.section("cognitiveStyle").source
    assert edited is not None and edited.actor == "reviewer@example.com" and edited.kind == "manual"
    extracted = profile.section("workContext").source
    assert extracted is not None and extracted.actor is None and extracted.message_id == "lw1-u1"


def test_it_ignores_an_actor_typed_into_a_card_file_as_before() -> None:
    text = (DATA / "confirmed_card.md").read_text(encoding="utf-8")
    edited = text.replace("  kind: extraction\n", "  kind: extraction\n  actor: someone\n")
    assert edited != text
    card = parse_card(edited, DATA / "confirmed_card.md")
    assert card.source.actor is None
    assert card == parse_card(text, DATA / "confirmed_card.md")
    assert dump_card(card) == text
