"""The fact card file: a Markdown file with YAML front matter (docs/design.md §4).

`Card` and its `Source` are the pydantic models of the file format; `dump_card` writes
a card exactly as `yaml.dump` would (by a fast emitter for the simple values a card
holds) and `parse_card` reads it back (by a fast reader for the layout `dump_card`
writes, falling back to the YAML parser for anything a person may have typed).
Reading what was written gives the same card and writing it again the same bytes.
"""

from __future__ import annotations

import functools
import hashlib
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import frontmatter
import yaml
import yaml.resolver
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from facts.enums import CardStatus, Category, SourceKind
from facts.storage.errors import CardParseError
from facts.storage.ids import check_fact_id


def now_utc() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _encodable(value: Any) -> Any:
    """Refuse lone surrogates (JSON can carry "\\ud800"): they cannot be written as UTF-8."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("text is not valid Unicode (lone surrogate)") from None
    return value


class Source(BaseModel):
    """Where a card or a profile section came from: the run, thread and user message
    that are its evidence. `actor` is who edited or approved a profile section; a card
    has none (its revisions name who wrote each one), so its file never holds one."""

    model_config = ConfigDict(extra="ignore")

    kind: SourceKind = SourceKind.MANUAL
    run_id: str | None = None
    thread_id: str | None = None
    message_id: str | None = None
    evidence_text: str | None = None
    actor: str | None = None

    _unicode = field_validator("run_id", "thread_id", "message_id", "evidence_text", "actor")(_encodable)


class Card(BaseModel):
    """A fact card: YAML front matter plus the fact content as the Markdown body."""

    model_config = ConfigDict(extra="ignore", validate_assignment=True)

    id: str
    key: str = Field(min_length=1, max_length=120)
    category: Category
    status: CardStatus = CardStatus.ACTIVE
    confidence: float = Field(ge=0, le=1, allow_inf_nan=False)
    user_id: str | None = None
    agent_name: str | None = None
    project_id: str | None = None
    created_at: datetime
    updated_at: datetime
    last_confirmed_at: datetime | None = None
    confirmation_count: int = Field(default=0, ge=0)
    expires_at: datetime | None = None
    review_by: datetime | None = None
    superseded_by: str | None = None
    source: Source = Field(default_factory=Source)
    revision: int = Field(default=1, ge=1)
    content: str = Field(min_length=1)

    @field_validator("id")
    @classmethod
    def _valid_id(cls, value: str) -> str:
        return check_fact_id(value)

    @field_validator("content", mode="before")
    @classmethod
    def _body(cls, value: Any) -> Any:
        # The body is stored as Markdown: line endings become \n and surrounding blank
        # space goes, exactly as reading the file back does, so what was written is
        # what is read (a trailing "\x85" or a lone "\r" used to change on the trip).
        if isinstance(value, str):
            value = _encodable(value).replace("\r\n", "\n").replace("\r", "\n").strip()
        return value

    _unicode = field_validator("key", "user_id", "project_id")(_encodable)

    @field_validator("source")
    @classmethod
    def _no_actor(cls, value: Source) -> Source:
        # An `actor:` typed into a card file by hand is ignored, as it always was: the
        # file would lose it on the next write.
        return value if value.actor is None else value.model_copy(update={"actor": None})

    @field_validator("created_at", "updated_at", "last_confirmed_at", "expires_at", "review_by")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value

    @property
    def is_project(self) -> bool:
        return self.project_id is not None and self.user_id is None

    def is_live(self, at: datetime | None = None) -> bool:
        """Active and not past its expiry date: the cards agents may be shown."""
        if self.status != CardStatus.ACTIVE:
            return False
        return self.expires_at is None or self.expires_at > (at or now_utc())


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


_FRONT_ORDER = (
    "id key category status confidence user_id agent_name project_id created_at updated_at "
    "last_confirmed_at confirmation_count expires_at review_by superseded_by source revision"
).split()


def _front_matter(card: Card) -> dict[str, Any]:
    data = card.model_dump(mode="python", exclude={"source": {"actor"}})
    meta: dict[str, Any] = {}
    for name in _FRONT_ORDER:
        value = data[name]
        if isinstance(value, datetime):
            value = _iso(value)
        elif name == "source":
            value = {k: v.value if hasattr(v, "value") else v for k, v in value.items()}
        elif hasattr(value, "value"):
            value = value.value
        if name in ("project_id",) and value is None and card.user_id is not None:
            continue
        if name in ("user_id", "agent_name") and value is None and card.user_id is None:
            continue
        meta[name] = value
    return meta


def _yaml(meta: dict[str, Any]) -> str:
    return yaml.dump(meta, Dumper=yaml.CSafeDumper, allow_unicode=True, sort_keys=False)


# The emitter below writes, for the values a card mostly holds (ids, enums, numbers,
# dates, null), exactly the text `_yaml` would; any other value is handed to `_yaml`
# itself. Building a YAML document costs ~10× more than these few string operations,
# and the write path dumps every card it writes. `test_properties_store` checks the
# output against `_yaml` on arbitrary cards.
_YAML_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
_YAML_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?Z")
_YAML_RESOLVER = yaml.resolver.Resolver()
_YAML_STR = "tag:yaml.org,2002:str"


@functools.lru_cache(maxsize=4096)  # statuses, kinds, categories, agent names repeat
def _yaml_word(value: str) -> str:
    """A word of safe characters: plain when YAML reads it back as a string, else quoted."""
    tag = _YAML_RESOLVER.resolve(yaml.ScalarNode, value, (True, False))
    return value if tag == _YAML_STR else f"'{value}'"


def _yaml_scalar(value: Any) -> str | None:
    """`value` as `_yaml` writes it after ``key: ``, or None when it is not one of the simple cases."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if type(value) is int:
        return str(value)
    if type(value) is float:
        text = repr(value)
        return text if "." in text and "e" not in text else None
    if type(value) is str:
        if _YAML_DATE.fullmatch(value):
            return f"'{value}'"
        if len(value) < 64 and _YAML_WORD.fullmatch(value):
            return _yaml_word(value)
    return None


def _yaml_lines(meta: dict[str, Any], depth: int = 0) -> list[str]:
    indent = "  " * depth
    lines = []
    for name, value in meta.items():
        # A key is a scalar too: `no`, `null` or `1` as a key is quoted like the value would be.
        key = _yaml_scalar(name) if type(name) is str else None
        if key is not None and isinstance(value, dict) and value:
            lines.append(f"{indent}{key}:\n")
            lines.extend(_yaml_lines(value, depth + 1))
            continue
        text = _yaml_scalar(value) if key is not None else None
        if text is not None:
            lines.append(f"{indent}{key}: {text}\n")
            continue
        # As `_yaml` writes it at this depth (its line width counts the indent).
        wrapped: dict[str, Any] = {name: value}
        for _ in range(depth):
            wrapped = {"_": wrapped}
        lines.append(_yaml(wrapped).split("\n", depth)[depth])
    return lines


def dump_front_matter(meta: dict[str, Any]) -> str:
    """The YAML of a card's front matter, byte for byte what `yaml.dump` writes."""
    return "".join(_yaml_lines(meta)) if meta else _yaml(meta)


def dump_card(card: Card) -> str:
    front = dump_front_matter(_front_matter(card))
    body = card.content.strip("\n")
    return f"---\n{front}---\n\n{body}\n"


# YAML only: left to detect the format, python-frontmatter would read a file starting
# with "+++" as TOML and one starting with "{" as JSON.
_YAML_FRONT = frontmatter.YAMLHandler()


def parse_card(text: str, path: Path) -> Card:
    """A card file's text → Card, or CardParseError saying what is wrong."""
    return parse_card_fast(text) or _parse_card_yaml(text, path)


def _parse_card_yaml(text: str, path: Path) -> Card:
    try:
        # `parse`, not `loads`: a hand-written `content:` key must not crash the reader.
        meta, body = frontmatter.parse(text, handler=_YAML_FRONT)
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as exc:
        raise CardParseError(path, f"front matter is not valid YAML ({exc.__class__.__name__})") from None
    if not meta:
        raise CardParseError(path, "no YAML front matter")
    data = dict(meta)
    data["content"] = body.strip()
    try:
        return Card.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'card'}: {err['msg']}" for err in exc.errors())
        raise CardParseError(path, problems) from None


_FM_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*):(?: (.*))?")
_FM_BOUNDARY = re.compile(r"-{3,}\s*")
_FM_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")  # YAML 1.1 reads 0777 as octal
_FM_FLOAT = re.compile(r"-?[0-9]+\.[0-9]*(?:[eE][-+][0-9]+)?")  # 1.1: the exponent has a sign
# Plain scalars that YAML could read as something other than a string, or that
# are not plain scalars at all: left to the real parser.
_FM_SPECIAL = re.compile(r"""[-?:,\[\]{}#&*!|>'"%@`\s]|.*(?:: | #|:$)|.*\s$""")
_FM_NULL = frozenset({"null", "Null", "NULL", "~"})
# A plain scalar YAML can only read as a string: it starts with a letter (or a non-ASCII
# character), so no number, date, null or indicator; no tabs; no ": " or " #" inside.
_FM_STRINGLIKE = re.compile(
    r"[^\x00-\x40\[\\\]^`{|}~\x7f-\xa0\u2028\u2029\ufeff][^\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff]*"
)
_FM_YAML_WORDS = frozenset("y Y yes Yes YES n N no No NO true True TRUE false False FALSE on On ON off Off OFF".split())


# Line breaks for YAML that are not "\n" for str.split.
_FM_BREAKS = re.compile("[\r\x85\u2028\u2029]")


class _NotSimple(Exception):
    pass


@functools.lru_cache(maxsize=8192)  # most values repeat: null, statuses, kinds, categories
def _fm_scalar(raw: str) -> Any:
    if raw in _FM_NULL:
        return None
    if raw.startswith("'"):
        inner = raw[1:-1]
        if len(raw) < 2 or not raw.endswith("'") or "'" in inner.replace("''", ""):
            raise _NotSimple
        return inner.replace("''", "'")
    if _FM_INT.fullmatch(raw):
        return int(raw)
    if _FM_FLOAT.fullmatch(raw):
        return float(raw)
    if _FM_STRINGLIKE.fullmatch(raw) and raw not in _FM_YAML_WORDS and not _FM_SPECIAL.match(raw):
        return raw
    raise _NotSimple


def parse_card_fast(text: str) -> Card | None:
    """The front matter as `dump_card` writes it, read without the YAML machinery.

    Building YAML nodes is most of a rebuild's time. Only the flat layout the store
    writes (one ``key: value`` per line, single-quoted or simple plain scalars, the
    ``source`` mapping indented by two spaces) is read here; anything else — and any
    card that fails validation — returns None and goes through the YAML parser, so the
    result and the error messages are the same as with the full parser.
    """
    if not text.startswith("---\n") or _FM_BREAKS.search(text):
        return None
    lines = text[4:].split("\n")
    data: dict[str, Any] = {}
    nested: dict[str, Any] | None = None
    try:
        for number, line in enumerate(lines):
            if line.startswith("---"):
                if not _FM_BOUNDARY.fullmatch(line):
                    raise _NotSimple
                body = "\n".join(lines[number + 1 :])
                break
            if line.startswith("  ") and nested is not None:
                match = _FM_KEY.fullmatch(line[2:])
                if not match or match.group(2) is None:
                    raise _NotSimple
                nested[match.group(1)] = _fm_scalar(match.group(2))
                continue
            match = _FM_KEY.fullmatch(line)
            if not match:
                raise _NotSimple
            name, raw = match.groups()
            if raw is None:
                nested = data[name] = {}
            else:
                nested = None
                data[name] = _fm_scalar(raw)
        else:
            return None
    except _NotSimple:
        return None
    if not data:
        return None
    data["content"] = body.strip()
    try:
        return Card.model_validate(data)
    except ValidationError:
        return None


def file_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
