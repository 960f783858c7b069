"""Property-based tests of the file format and of id normalization (hypothesis)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from facts.enums import HISTORY_SECTIONS, USER_SECTIONS, CardStatus, Category, SourceKind
from facts.storage.cardfile import Card, Source, _front_matter, _yaml, dump_card, dump_front_matter, parse_card
from facts.storage.errors import CardParseError, InvalidId
from facts.storage.ids import new_fact_id, normalize_agent, normalize_id
from facts.storage.profilefile import Profile, Section, dump_profile, parse_profile
from facts.storage.store import Store

# Any text a person or a model could send, control characters included.
any_text = st.text(st.characters(codec="utf-8"), max_size=300)
some_text = any_text.filter(lambda s: s.strip() != "")
moments = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)).map(
    lambda d: d.replace(microsecond=0)
)
ids = st.text(st.characters(codec="utf-8"), min_size=1, max_size=200).filter(lambda s: "\x00" not in s)

cards = st.builds(
    Card,
    id=st.builds(new_fact_id),
    key=st.text(st.characters(codec="utf-8"), min_size=1, max_size=120).filter(lambda s: s.strip() != ""),
    category=st.sampled_from(list(Category)),
    status=st.sampled_from(list(CardStatus)),
    confidence=st.floats(min_value=0, max_value=1, allow_nan=False),
    user_id=ids,
    agent_name=st.sampled_from([None, "coder", "a-1", "__default__"]),
    created_at=moments,
    updated_at=moments,
    last_confirmed_at=st.none() | moments,
    confirmation_count=st.integers(0, 10**6),
    expires_at=st.none() | moments,
    source=st.builds(
        Source,
        kind=st.sampled_from(list(SourceKind)),
        run_id=st.none() | any_text,
        thread_id=st.none() | any_text,
        message_id=st.none() | any_text,
        evidence_text=st.none() | any_text,
    ),
    revision=st.integers(1, 10**6),
    content=some_text,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(card=cards)
def test_every_card_survives_its_file_format(card: Card) -> None:
    text = dump_card(card)
    parsed = parse_card(text, Path("x.md"))
    assert parsed == card
    assert dump_card(parsed) == text, "writing a parsed card again must give the same bytes"


# Values the front-matter emitter writes itself (words, numbers, dates, null) and values
# it must hand to yaml (anything else), in the nesting a card uses.
yaml_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.from_regex(r"[A-Za-z0-9_.+:-]{1,80}", fullmatch=True)
    | st.sampled_from(["yes", "No", "on", "OFF", "null", "~", "1_000", "0x1f", "0o17", "1e5", "1.5", ".inf", "08"])
    | moments.map(lambda d: d.isoformat().replace("+00:00", "Z"))
    | any_text
)
# Words YAML 1.1 reads as something other than a string must come back quoted as keys too
# (CI once found `no:` written plain).
front_keys = st.from_regex(r"[a-z_]{1,20}", fullmatch=True) | st.sampled_from(
    ["no", "No", "yes", "y", "n", "on", "off", "true", "null", "_", "1", "0x1f", "1e3", "1_000", "2026-01-01"]
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    meta=st.dictionaries(front_keys, yaml_scalars | st.dictionaries(front_keys, yaml_scalars, max_size=6), max_size=18)
)
def test_the_front_matter_emitter_writes_what_yaml_writes(meta: dict) -> None:
    assert dump_front_matter(meta) == _yaml(meta)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(card=cards)
def test_a_card_front_matter_is_what_yaml_writes(card: Card) -> None:
    meta = _front_matter(card)
    assert dump_front_matter(meta) == _yaml(meta)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(card=cards)
def test_every_card_survives_a_trip_through_the_disk(card: Card, tmp_path: Path) -> None:
    store = Store(tmp_path)
    path = store.write_card(card)
    assert store.read_card_at(path) == card
    assert path.is_relative_to(tmp_path)


sections = st.builds(
    Section,
    summary=any_text,
    updated_at=st.none() | moments,
    source=st.none()
    | st.builds(Source, kind=st.sampled_from(list(SourceKind)), evidence_text=any_text, actor=st.none() | any_text),
)


@settings(max_examples=150)
@given(user_id=ids, revision=st.integers(0, 10**6), data=st.data())
def test_every_profile_survives_memory_json(user_id: str, revision: int, data: st.DataObject) -> None:
    profile = Profile(user_id=user_id, revision=revision)
    for name in USER_SECTIONS + HISTORY_SECTIONS:
        profile.set_section(name, data.draw(sections))
    text = dump_profile(profile)
    assert parse_profile(text, Path("memory.json")) == profile


@settings(max_examples=500)
@given(raw=ids)
@example(raw="..")
@example(raw=".")
@example(raw="../../etc/passwd")
@example(raw="a" * 200)
@example(raw="abc-0123456789abcdef")
@example(raw="con")
def test_a_normalized_id_is_one_safe_path_segment(raw: str) -> None:
    name = normalize_id(raw)
    assert name not in ("", ".", "..")
    assert "/" not in name and "\\" not in name and "\x00" not in name
    assert all(c.isascii() and (c.isalnum() or c in "-_") for c in name)
    assert len(name) <= 64 + 17
    assert PurePosixPath("root", name).parent == PurePosixPath("root")
    # idempotent-safe: a normalized name normalizes to itself or to another safe name,
    # never back into something that collides with a different raw id
    again = normalize_id(name)
    assert again == name or again != raw


@settings(max_examples=500)
@given(a=ids, b=ids)
def test_different_ids_never_share_a_folder(a: str, b: str) -> None:
    assume(a != b)
    assert normalize_id(a) != normalize_id(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [("alice@example.com", "alice.example.com"), ("a/b", "a-b"), ("x" * 70, "x" * 71), ("Ä", "ä")],
)
def test_look_alike_ids_stay_apart(a: str, b: str) -> None:
    assert normalize_id(a) != normalize_id(b)


@given(raw=st.none() | st.text(max_size=80))
def test_agent_names_are_safe_or_refused(raw: str | None) -> None:
    try:
        name = normalize_agent(raw)
    except InvalidId:
        return
    assert name == "__default__" or (name and all(c in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in name))
    assert normalize_agent(name) == name


def test_a_card_dated_in_another_timezone_reads_back_in_utc() -> None:
    tz = datetime(2026, 1, 1, 12, tzinfo=UTC).astimezone(__import__("datetime").timezone(timedelta(hours=8)))
    card = Card(
        id=new_fact_id(), key="k", category="goal", confidence=0.5, user_id="u", created_at=tz, updated_at=tz,
        content="x",
    )  # fmt: skip
    assert parse_card(dump_card(card), Path("x.md")).created_at == tz


def test_an_unparsable_card_is_a_card_parse_error() -> None:
    with pytest.raises(CardParseError):
        parse_card("---\nid: 1\n---\n", Path("x.md"))
