"""What a stored turn may contain: the rules for control characters and for what JSON can carry.

Every door (the HTTP API, the in-process LangChain middleware, the ``ingest`` command)
goes through `facts.intake.turns.clean_turn`, which applies this module:

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
  Nesting deeper than 32 levels and lone surrogates are refused too (`check_json`,
  which the API also applies to every request body).
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


def clean_value(value: Any) -> Any:
    """`value` with the control characters of every string and key removed.

    Containers are copied, strings only when they hold a control character (about
    12 µs for a typical message). Run `check_json` first: this keeps numbers as they are.
    """
    if isinstance(value, str):
        return strip_controls(value)
    if isinstance(value, dict):
        return {(strip_controls(k) if isinstance(k, str) else k): clean_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_value(item) for item in value]
    return value


# --- what JSON can carry -----------------------------------------------------------------

MAX_JSON_DEPTH = 32


class NotJson(ValueError):
    """A value no JSON column can store. `field` names the place (``body`` for faults of
    the whole document); `malformed` marks a broken document rather than a bad field."""

    def __init__(self, field: str, message: str, *, malformed: bool) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.malformed = malformed


def check_json(data: Any, path: Sequence[str | int] = ()) -> None:
    """Refuse nesting deeper than MAX_JSON_DEPTH (counted from the document's root, of
    which `path` is the place of `data`), strings that are not valid Unicode (JSON's
    ``\\ud800`` escapes decode to lone surrogates that cannot be stored), and numbers
    that are not finite: Python's parser takes ``NaN``, ``Infinity`` and ``1e999``,
    which are not JSON and which neither SQLite's JSON nor PostgreSQL's jsonb can store.
    """
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, tuple(path))]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            _check_text(value)
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                name = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
                message = f"{name} is not a JSON number; send a finite number or null"
                raise NotJson(path_text(where) or "body", message, malformed=False)
            continue
        if isinstance(value, dict):
            children: Any = value.items()
        elif isinstance(value, list | tuple):
            children = enumerate(value)
        else:
            continue
        if len(where) >= MAX_JSON_DEPTH:
            raise NotJson("body", f"JSON nested deeper than {MAX_JSON_DEPTH} levels", malformed=True)
        for key, item in children:
            if isinstance(key, str):
                _check_text(key)
            if isinstance(item, dict | list | tuple | str | float):
                stack.append((item, (*where, key)))


def _check_text(value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise NotJson("body", "contains a string that is not valid Unicode (lone surrogate)", malformed=True) from None


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
