"""User, project and agent ids on disk (docs/design.md §4)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from facts.storage.errors import InvalidId
from facts.storage.ids import DEFAULT_AGENT, normalize_agent, normalize_id
from facts.storage.store import Store


def _tail(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("alice", "alice"),
        ("user_42-x", "user_42-x"),
        ("alice@example.com", "alice-example-com-" + _tail("alice@example.com")),
        ("alice.example.com", "alice-example-com-" + _tail("alice.example.com")),
        ("../../etc/passwd", "------etc-passwd-" + _tail("../../etc/passwd")),
        ("..", "---" + _tail("..")),
        ("用户甲", "----" + _tail("用户甲")),
        ("a b", "a-b-" + _tail("a b")),
    ],
)
def test_it_normalizes_ids_as_the_table_says(raw: str, expected: str) -> None:
    assert normalize_id(raw) == expected


def test_look_alike_ids_never_share_a_folder() -> None:
    assert normalize_id("alice@example.com") != normalize_id("alice.example.com")


def test_a_safe_id_that_looks_hashed_is_hashed_too() -> None:
    # Without this, a raw id could be chosen to equal another id's hashed folder name.
    crafted = normalize_id("alice@example.com")
    assert normalize_id(crafted) != crafted


@pytest.mark.parametrize("raw", ["", None, 42])
def test_it_rejects_empty_or_non_string_ids(raw) -> None:
    with pytest.raises(InvalidId):
        normalize_id(raw)


def test_it_rejects_ids_over_the_length_limit() -> None:
    with pytest.raises(InvalidId, match="longer than"):
        normalize_id("x" * 201)


def test_long_ids_fit_in_one_folder_name() -> None:
    name = normalize_id("x" * 200)
    assert len(name) <= 81
    assert normalize_id("x" * 200) != normalize_id("x" * 199)


def test_a_path_like_id_cannot_escape_the_root(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for raw in ("../../etc/passwd", "/etc/passwd", "..", ".", "a/../../b", "\\..\\x"):
        folder = store.user_dir(raw).resolve()
        assert folder.parent == (tmp_path / "users").resolve()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, DEFAULT_AGENT),
        ("", DEFAULT_AGENT),
        ("  ", DEFAULT_AGENT),
        ("Coder", "coder"),
        ("code-review-2", "code-review-2"),
    ],
)
def test_it_normalizes_agent_names(raw, expected) -> None:
    assert normalize_agent(raw) == expected


@pytest.mark.parametrize("raw", ["../x", "a/b", "agent_1", "a" * 65, "-x", "日本"])
def test_it_rejects_agent_names_outside_the_rule(raw: str) -> None:
    with pytest.raises(InvalidId):
        normalize_agent(raw)
