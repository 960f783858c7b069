"""What a stored turn may contain: the rule for control characters and non-finite numbers.

Every door (the HTTP API, the in-process LangChain middleware, the ``ingest`` command)
goes through `facts.turns.clean_turn`, which applies this module:

- **Ids** (user, thread, project, message) with any control character are refused: an id
  carrying one is always a client bug, and PostgreSQL cannot store a NUL at all.
- **Every other string of a message** (content, content blocks, ``additional_kwargs``,
  tool-call names and arguments, and the keys of those objects) loses its control
  characters — Unicode category Cc (C0, DEL, C1) except tab, line feed and carriage
  return — before it is stored. Agents paste tool output and terminal text into turns;
  refusing the whole turn for one stray ``\\x00`` would lose the user's words with it,
  and a NUL must never reach a card file, the memory block or a JSON column.
- **Numbers** must be finite: ``NaN`` and ``±Infinity`` are not JSON, and neither
  SQLite's JSON check nor PostgreSQL's jsonb can store them. A turn holding one is
  refused, and the error names where it is (``messages[0].additional_kwargs.score``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

# Category Cc minus \t \n \r. (U+0085 NEL is C1: Python treats it as a line break, which
# is one more reason to drop it from text that ends up in line-oriented card files.)
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
ANY_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def strip_controls(text: str) -> str:
    return CONTROL_CHARS.sub("", text) if CONTROL_CHARS.search(text) else text


def has_control(text: str) -> bool:
    return ANY_CONTROL.search(text) is not None


def path_text(parts: Sequence[str | int]) -> str:
    """``messages[2].additional_kwargs.score`` from ("messages", 2, "additional_kwargs", "score")."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,40}", part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part[:40], ensure_ascii=True)}]"
    return out


class NonFinite(ValueError):
    def __init__(self, path: str, value: float) -> None:
        super().__init__(f"{path}: {value!r} is not a JSON number (NaN and Infinity are refused)")
        self.path = path
        self.value = value


def clean_value(value: Any, path: Sequence[str | int] = ()) -> Any:
    """`value` with the control characters of every string and key removed.

    Raises `NonFinite` naming the first NaN/±Infinity. Containers are copied, strings
    only when they hold a control character (about 12 µs for a typical message).
    """
    if isinstance(value, str):
        return strip_controls(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NonFinite(path_text(path), value)
        return value
    if isinstance(value, dict):
        return {
            (strip_controls(k) if isinstance(k, str) else k): clean_value(v, (*path, str(k))) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [clean_value(item, (*path, i)) for i, item in enumerate(value)]
    return value


# --- pydantic errors as short lines ------------------------------------------------------

# Parts of a pydantic error location that name a union member or a validator, not a field.
_TAGS = {
    "str", "int", "float", "bool", "dict", "list", "tuple", "set", "none", "bytes", "union",
    "function-after", "function-before", "function-wrap", "function-plain", "is-instance",
    "lax-or-strict", "json-or-python", "tagged-union", "chain", "nullable", "default",
}  # fmt: skip


def _is_tag(part: str | int) -> bool:
    return isinstance(part, str) and ("[" in part or part in _TAGS)


def error_lines(errors: Sequence[Any], prefix: Sequence[str | int] = (), *, limit: int = 5) -> list[str]:
    """pydantic's ``ValidationError.errors()`` as one short line per problem.

    ``messages[2].content[0]: Input should be a valid string or a valid dictionary``:
    union-member tags are dropped from the location, a member's error is dropped when a
    deeper one explains the same field (a list given to ``str | list[…]`` fails the
    ``str`` member too, which is noise), and the members' messages at one place are
    joined with "or".
    """
    by_place: dict[tuple[str | int, ...], list[str]] = {}
    for err in errors:
        place = tuple(part for part in err.get("loc", ()) if not _is_tag(part))
        message = str(err.get("msg", "is invalid")).splitlines()[0][:200]
        by_place.setdefault(place, [])
        if message not in by_place[place]:
            by_place[place].append(message)
    places = [p for p in by_place if not any(len(q) > len(p) and q[: len(p)] == p for q in by_place)]
    lines: list[str] = []
    for place in places:
        first, *others = by_place[place]
        rest = [m.removeprefix("Input should be ") if first.startswith("Input should be ") else m for m in others]
        text = " or ".join([first, *rest])
        lines.append(f"{path_text([*prefix, *place]) or 'body'}: {text}")
    if len(lines) > limit:
        lines = [*lines[:limit], f"(and {len(lines) - limit} more)"]
    return lines


class InvalidMessage(ValueError):
    """A message that LangChain's own models refused; `lines(prefix)` says where."""

    def __init__(self, errors: Sequence[Any]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(error_lines(self.errors)))

    def lines(self, prefix: Sequence[str | int]) -> list[str]:
        return error_lines(self.errors, prefix)
