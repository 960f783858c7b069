"""The rebuild's fast scan reads exactly what the full parser reads, in the same order."""

from __future__ import annotations

import multiprocessing
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from facts.storage import scan
from facts.storage.cardfile import Card, Source, _parse_card_yaml, dump_card, parse_card_fast
from facts.storage.store import Store
from retrieval.tokenize import document_terms
from tests.conftest import FIXED_NOW

TRICKY = [
    "plain words",
    "yes",
    "no",
    "null",
    "~",
    "2026-01-01",
    "2026-01-01 10:00:00",
    "0777",
    "1.5e3",
    "1.5e+3",
    "12",
    "-3",
    ".5",
    "a: b",
    "a #comment",
    "ends with colon:",
    "'quoted'",
    '"double"',
    "it's",
    "- dash",
    "? question",
    "@at",
    "`tick`",
    "%percent",
    "  leading",
    "trailing  ",
    "tab\there",
    "line\nbreak",
    "用户说：好的",
    "emoji 😀",
    "\u2028separator",
    "x" * 200,
]


def _card(value: str, **extra) -> Card:
    return Card(
        id="fact_0123456789ab",
        key=(value.strip() or "k")[:120],
        category="goal",
        confidence=0.5,
        user_id=value or "u",
        agent_name="coder",
        created_at=FIXED_NOW,
        updated_at=FIXED_NOW,
        expires_at=FIXED_NOW + timedelta(days=3),
        source=Source(kind="manual", evidence_text=value, thread_id=value, message_id=value),
        content=(value.strip() or "c") + "\n---\nbody after a rule",
        **extra,
    )


@pytest.mark.parametrize("value", TRICKY)
def test_the_fast_reader_agrees_with_the_full_parser(value: str) -> None:
    text = dump_card(_card(value))
    fast = parse_card_fast(text)
    assert fast is None or fast == _parse_card_yaml(text, Path("x.md"))


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=60))
def test_the_fast_reader_agrees_on_any_text(value: str) -> None:
    try:
        card = _card(value)
    except ValueError:
        return
    text = dump_card(card)
    fast = parse_card_fast(text)
    assert fast is None or fast == _parse_card_yaml(text, Path("x.md"))


@pytest.mark.parametrize(
    "text",
    [
        "---\nid: fact_0123456789ab\nkey: [unclosed\n---\nbody\n",
        "---\nid: fact_0123456789ab\n  bad: indent\n---\nbody\n",
        "no front matter at all\n",
        "---\nid: fact_0123456789ab\nconfidence: 7\n---\nbody\n",
    ],
)
def test_anything_unusual_goes_to_the_full_parser(text: str) -> None:
    assert parse_card_fast(text) is None


def test_the_parallel_scan_walks_in_the_stores_order(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for u in range(70):
        for n in range(3):
            card = _card("v").model_copy(update={"id": f"fact_{u:06x}{n:06x}", "user_id": f"user{u}"})
            store.write_card(card)
    (tmp_path / "users" / "stray.md").write_text("not a card")
    expected = [store.relative(p) for p in store.card_files()]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert scan._card_rels(store, pool) == expected
    assert scan._card_rels(store) == expected
    scanned = list(scan.scan_cards(store, workers=2))
    assert [s.rel for s in scanned] == expected
    assert sum(1 for s in scanned if s.card is not None) == 210
    # The read side's tokens, computed in the scanning processes, are what it computes itself.
    assert all(s.extra["index"].terms.terms == document_terms(s.card.content) for s in scanned if s.card is not None)
