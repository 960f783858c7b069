"""Fuzzing the readers of the memory files: any text gives a Card (or Profile) or a
CardParseError, never another exception — a hand-edited file can never crash reindex."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from facts.storage.cardfile import Card, dump_card, parse_card
from facts.storage.errors import CardParseError
from facts.storage.ids import new_fact_id
from facts.storage.profilefile import Profile, parse_profile
from facts.storage.store import Store

PATH = Path("fuzz.md")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
field_names = st.sampled_from(
    "id key category status confidence user_id agent_name project_id created_at updated_at last_confirmed_at "
    "confirmation_count expires_at review_by superseded_by source revision content".split()
)


def _parses_or_refuses(text: str) -> None:
    try:
        card = parse_card(text, PATH)
    except CardParseError:
        return
    assert isinstance(card, Card)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=400))
@example(text="---\n---\n")
@example(text="---\n- a\n- b\n---\nbody")
@example(text="---\n!!python/object:os.system ls\n---\nx")
@example(text="---\nid: &a [*a]\n---\nx")
@example(text="---\n" + "[" * 5000 + "\n---\nx")
@example(text="---\nconfidence: .nan\n---\nx")
@example(text="---\ncreated_at: 99999-01-01\n---\nx")
def test_any_text_is_a_card_or_a_parse_error(text: str) -> None:
    _parses_or_refuses(text)
    _parses_or_refuses("---\n" + text)
    _parses_or_refuses("---\n" + text + "\n---\nbody")


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(meta=st.dictionaries(field_names | st.text(max_size=8), json_values, max_size=10), body=st.text(max_size=50))
def test_any_front_matter_is_a_card_or_a_parse_error(meta: dict, body: str) -> None:
    front = yaml.safe_dump(meta, allow_unicode=True)
    _parses_or_refuses(f"---\n{front}---\n{body}")


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_real_card_with_one_field_mangled_is_a_card_or_a_parse_error(data: st.DataObject) -> None:
    card = Card(
        id=new_fact_id(), key="k", category="goal", confidence=0.5, user_id="u",
        created_at="2026-01-01T00:00:00Z", updated_at="2026-01-01T00:00:00Z", content="x",
    )  # fmt: skip
    meta = yaml.safe_load(dump_card(card).split("---\n")[1])
    meta[data.draw(field_names)] = data.draw(json_values)
    _parses_or_refuses(f"---\n{yaml.safe_dump(meta)}---\nbody")


@settings(max_examples=300)
@given(text=st.text(max_size=300) | json_values.map(json.dumps))
def test_any_memory_json_is_a_profile_or_a_parse_error(text: str) -> None:
    with contextlib.suppress(CardParseError):
        assert isinstance(parse_profile(text, Path("memory.json")), Profile)


def test_a_file_that_is_not_utf8_is_a_parse_error(tmp_path: Path) -> None:
    path = tmp_path / "fact_000000000000.md"
    path.write_bytes(b"---\nid: fact_000000000000\n---\n\xff\xfe broken")
    store = Store(tmp_path)
    try:
        store.read_card_at(path)
    except CardParseError as exc:
        assert "UTF-8" in exc.message
    else:  # pragma: no cover
        raise AssertionError("invalid UTF-8 was accepted")


# --- the rebuild's fast front-matter reader must agree with the real one -------------------


def _agrees(text: str) -> None:
    from facts.storage.cardfile import _parse_card_yaml, parse_card_fast

    fast = parse_card_fast(text)
    if fast is None:
        return
    try:
        slow = _parse_card_yaml(text, PATH)
    except CardParseError as exc:  # pragma: no cover - a disagreement
        raise AssertionError(f"the fast reader accepted a card the real parser refuses: {exc.message}") from None
    assert fast == slow


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(card=__import__("tests.test_properties_store", fromlist=["cards"]).cards)
def test_the_fast_reader_reads_every_written_card_as_the_real_parser_does(card: Card) -> None:
    _agrees(dump_card(card))


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_fast_reader_never_disagrees_on_a_hand_edited_line(data: st.DataObject) -> None:
    card = Card(
        id=new_fact_id(), key="k", category="goal", confidence=0.5, user_id="u",
        created_at="2026-01-01T00:00:00Z", updated_at="2026-01-01T00:00:00Z", content="x",
    )  # fmt: skip
    lines = dump_card(card).split("\n")
    front_end = lines.index("---", 1)
    where = data.draw(st.integers(1, front_end - 1))
    name = lines[where].split(":", 1)[0]
    value = data.draw(
        st.text(max_size=30)
        | st.sampled_from(["yes", "no", "on", "0x10", "0777", "1e5", "1.0e+5", ".5", "~", "''", "'a''b'", "null"])
    )
    lines[where] = f"{name}: {value}"
    _agrees("\n".join(lines))
