"""The file store: the one module that reads and writes memory files.

Layout (DESIGN.md §3)::

    {root}/users/{user}/memory.json
    {root}/users/{user}/agents/{agent}/facts/{xx}/{fact_id}.md
    {root}/projects/{project}/facts/{xx}/{fact_id}.md
    {root}/.retrieval/            derived index, owned by the retrieval app
    {root}/.locks/                per-user and per-project lock files

Nothing here touches the database; `facts.writer` composes store + mirror + index.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import frontmatter
import yaml
import yaml.resolver
from filelock import FileLock, Timeout
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .enums import HISTORY_SECTIONS, USER_SECTIONS, CardStatus, Category, SourceKind

DEFAULT_AGENT = "__default__"
MAX_ID_CHARS = 200
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_HASHED_TAIL = re.compile(r"-[0-9a-f]{16}$")
_AGENT = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
_FACT_ID = re.compile(r"^fact_[0-9a-f]{12}$")
# Longest readable prefix kept on disk; the hash keeps longer ids apart.
_SLUG_PREFIX = 64
# Temp files of atomic writes; readers and the rebuild skip them.
TEMP_PREFIX = ".tmp-"


class StoreError(Exception):
    """Base class of the store's errors."""


class InvalidId(StoreError, ValueError):
    """A user, project, agent or fact id that cannot name a place on disk."""


class CardParseError(StoreError):
    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class RevisionConflict(StoreError):
    """The file changed since the caller read it (a lost update was prevented)."""


class LockTimeout(StoreError):
    pass


# --- ids -------------------------------------------------------------------------


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def normalize_id(raw: str, *, what: str = "id") -> str:
    """Map a user or project id to a folder name that can never escape the root.

    Safe ids are kept as they are. Anything else (unsafe characters, very long, or a
    safe id that merely looks like a hashed one) gets the unsafe characters replaced
    by ``-`` and the first 16 hex digits of SHA-256 of the raw id appended, so
    ``alice@example.com`` and ``alice.example.com`` never share a folder.
    """
    if not isinstance(raw, str) or raw == "":
        raise InvalidId(f"{what} must be a non-empty string")
    if len(raw) > MAX_ID_CHARS:
        raise InvalidId(f"{what} is longer than {MAX_ID_CHARS} characters")
    if "\x00" in raw:
        raise InvalidId(f"{what} contains a NUL character")
    safe = _UNSAFE.sub("-", raw)
    if safe == raw and len(raw) <= _SLUG_PREFIX and not _HASHED_TAIL.search(raw):
        return raw
    return f"{safe[:_SLUG_PREFIX]}-{_digest(raw)}"


def normalize_agent(raw: str | None) -> str:
    """Agent names are lower-case ``[a-z0-9-]+``; a missing one is ``__default__``."""
    if raw is None or (isinstance(raw, str) and raw.strip() == ""):
        return DEFAULT_AGENT
    if not isinstance(raw, str):
        raise InvalidId("agent_name must be a string")
    if raw == DEFAULT_AGENT:
        return raw
    name = raw.strip().lower()
    if not _AGENT.match(name):
        raise InvalidId("agent_name must be lower-case letters, digits and '-' (at most 64)")
    return name


def check_fact_id(fact_id: str) -> str:
    if not isinstance(fact_id, str) or not _FACT_ID.match(fact_id):
        raise InvalidId("fact id must be 'fact_' followed by 12 hex digits")
    return fact_id


def new_fact_id() -> str:
    return "fact_" + secrets.token_hex(6)


def shard(fact_id: str) -> str:
    return hashlib.sha256(fact_id.encode()).hexdigest()[:2]


def now_utc() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


# --- file formats ----------------------------------------------------------------


def _encodable(value: Any) -> Any:
    """Refuse lone surrogates (JSON can carry "\\ud800"): they cannot be written as UTF-8."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("text is not valid Unicode (lone surrogate)") from None
    return value


class Source(BaseModel):
    model_config = ConfigDict(extra="ignore")

    kind: SourceKind = SourceKind.MANUAL
    run_id: str | None = None
    thread_id: str | None = None
    message_id: str | None = None
    evidence_text: str | None = None

    _unicode = field_validator("run_id", "thread_id", "message_id", "evidence_text")(_encodable)


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


class SectionSource(BaseModel):
    model_config = ConfigDict(extra="ignore")

    kind: SourceKind = SourceKind.MANUAL
    run_id: str | None = None
    thread_id: str | None = None
    message_id: str | None = None
    evidence_text: str | None = None
    actor: str | None = None


class Section(BaseModel):
    model_config = ConfigDict(extra="ignore")

    summary: str = ""
    updated_at: datetime | None = None
    source: SectionSource | None = None


def _sections(names: tuple[str, ...]) -> type[BaseModel]:
    fields: dict[str, Any] = {name: (Section, Field(default_factory=Section)) for name in names}
    from pydantic import create_model

    return create_model("Sections", __config__=ConfigDict(extra="ignore"), **fields)


UserSections = _sections(USER_SECTIONS)
HistorySections = _sections(HISTORY_SECTIONS)


class Profile(BaseModel):
    """``memory.json``: a user's global profile and history summaries."""

    model_config = ConfigDict(extra="ignore")

    version: int = 1
    revision: int = 0
    user_id: str
    updated_at: datetime | None = None
    user: UserSections = Field(default_factory=UserSections)  # type: ignore[valid-type]
    history: HistorySections = Field(default_factory=HistorySections)  # type: ignore[valid-type]

    def section(self, name: str) -> Section:
        group = self.user if name in USER_SECTIONS else self.history
        return getattr(group, name)

    def set_section(self, name: str, section: Section) -> None:
        if name not in USER_SECTIONS and name not in HISTORY_SECTIONS:
            raise KeyError(name)
        group = self.user if name in USER_SECTIONS else self.history
        setattr(group, name, section)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


_FRONT_ORDER = (
    "id key category status confidence user_id agent_name project_id created_at updated_at "
    "last_confirmed_at confirmation_count expires_at review_by superseded_by source revision"
).split()


def _front_matter(card: Card) -> dict[str, Any]:
    data = card.model_dump(mode="python")
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


def dump_profile(profile: Profile) -> str:
    return json.dumps(profile.model_dump(mode="json"), ensure_ascii=False, indent=2) + "\n"


def parse_profile(text: str, path: Path) -> Profile:
    try:
        return Profile.model_validate_json(text)
    except ValidationError as exc:
        raise CardParseError(path, str(exc.errors()[0]["msg"])) from None


# --- atomic IO --------------------------------------------------------------------


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Memory is personal: what this code creates under MEMORY_ROOT is for its own user only
# (`doctor` warns about folders other users can read). Modes are given at creation, not
# chmod-ed afterwards, so there is no moment when a file is open to others; the umask can
# only take bits away.
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def _create_folders(path: Path, parents: list[Path]) -> None:
    """Create the missing folders of `path` (private), top down, appending to `parents`
    each folder that gained an entry (and so still needs an fsync) as soon as it has."""
    missing: list[Path] = []
    cursor = path
    while not cursor.exists():
        missing.append(cursor)
        cursor = cursor.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            continue
        parents.append(folder.parent)


def make_private_dirs(path: Path) -> None:
    """`mkdir -p` whose every new folder is private (`Path.mkdir(parents=True)` and
    `os.makedirs` give the intermediate folders the default mode)."""
    _create_folders(Path(path), [])


def create_private_file(path: Path) -> None:
    """Create `path` empty and private unless it exists, e.g. before SQLite opens it
    (SQLite creates its database, and then its -wal and -shm files, with the database
    file's mode)."""
    make_private_dirs(Path(path).parent)
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE_MODE))


def _write_temp(path: Path, data: str) -> str:
    """`data` in a fsynced temp file beside `path`; returns the temp file's name.

    Plain `os` calls, each releasing the GIL: the write threads hold it as little as
    possible while the calling thread works beside them."""
    tmp = os.path.join(path.parent, f"{TEMP_PREFIX}{secrets.token_hex(8)}{path.suffix}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE_MODE)  # as mkstemp
    try:
        try:
            view = memoryview(data.encode("utf-8"))
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


def _rename(tmp: str, path: Path) -> None:
    try:
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write(path: Path, data: str) -> None:
    """Temp file in the same folder → fsync → os.replace → fsync the folder (and the
    parent of any folder created for it)."""
    error = atomic_write_many([(path, data)])[0]
    if error is not None:
        raise error


_WRITE_THREADS = 8
_write_pool: ThreadPoolExecutor | None = None
_write_pool_guard = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _write_pool
    with _write_pool_guard:
        if _write_pool is None:
            _write_pool = ThreadPoolExecutor(max_workers=_WRITE_THREADS, thread_name_prefix="card-write")
        return _write_pool


def _new_pool_after_fork() -> None:
    # A forked child (`manage.py ingest --workers`) has none of the parent's threads:
    # it starts a pool of its own on first use.
    global _write_pool, _write_pool_guard
    _write_pool, _write_pool_guard = None, threading.Lock()


os.register_at_fork(after_in_child=_new_pool_after_fork)


def _each(function: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """`function` over `items` on the write pool (in the calling thread for one item);
    each result is the value or the exception it raised."""

    def call(item: Any) -> Any:
        try:
            return function(item)
        except Exception as exc:
            return exc

    return list(_pool().map(call, items)) if len(items) > 1 else [call(item) for item in items]


def atomic_write_many(
    items: Sequence[tuple[Path, str]], *, while_waiting: Callable[[], None] | None = None
) -> list[BaseException | None]:
    """`atomic_write` for a batch of files: one error (or None) per item, in order.

    Each file still gets its own fsynced temp file and rename, and the call returns
    only once every folder involved has been fsynced, so each write is exactly as
    durable as with `atomic_write`. A batch runs in phases: the temp files are written
    and fsynced side by side on the write threads, renamed in order, then
    each folder holding one of them (and each folder that gained a subfolder) is
    fsynced once, where a loop of `atomic_write` would fsync a folder per file and
    the parent of every new folder once per folder. `while_waiting` runs on the
    calling thread while the disk works on the temp files; its exception is raised
    once the batch is complete.
    """
    # The write threads create missing folders as they go; every folder that gained a
    # new subfolder joins the folders fsynced at the end (cards landing in twenty new
    # shard folders fsync `facts/` once). A list's append is atomic.
    new_parents: list[Path] = []

    def write(item: tuple[Path, str]) -> str:
        path, data = item
        _create_folders(path.parent, new_parents)
        return _write_temp(path, data)

    futures = [_pool().submit(write, item) for item in items] if len(items) > 1 else []
    failure: BaseException | None = None
    if while_waiting is not None:
        try:
            while_waiting()
        except BaseException as exc:
            failure = exc  # raised once the batch is complete: never with writes in flight
    temps: list[Any] = [f.exception() or f.result() for f in futures] if futures else _each(write, items)
    # Renamed in order: a path named twice ends with its last version.
    results: list[BaseException | None] = []
    for (path, _), temp in zip(items, temps, strict=True):
        if isinstance(temp, BaseException):
            results.append(temp)
            continue
        try:
            _rename(temp, path)
        except Exception as exc:
            results.append(exc)
            continue
        results.append(None)
    written = {path.parent for (path, _), error in zip(items, results, strict=True) if error is None}
    parents = set(new_parents)
    folders = sorted(written | parents)
    synced = dict(zip(folders, _each(_fsync_dir, folders), strict=True))
    if failure is not None:
        raise failure
    # A new folder's parent that failed to sync fails every file of the batch: which
    # files depended on it is not worth tracking for an error this rare.
    parent_error = next((synced[f] for f in sorted(parents) if synced[f] is not None), None)
    return [error or synced[path.parent] or parent_error for (path, _), error in zip(items, results, strict=True)]


def remove_file(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    _fsync_dir(path.parent)
    return True


# --- the store --------------------------------------------------------------------


@dataclass(frozen=True)
class Bucket:
    """Where a card lives: a user × agent bucket or a project bucket."""

    user_id: str | None = None
    agent_name: str | None = None
    project_id: str | None = None

    @classmethod
    def of(cls, card: Card) -> Bucket:
        if card.user_id is None:
            return cls(project_id=card.project_id)
        return cls(user_id=card.user_id, agent_name=normalize_agent(card.agent_name))

    @property
    def lock_name(self) -> str:
        if self.user_id is not None:
            return "users/" + normalize_id(self.user_id, what="user_id")
        return "projects/" + normalize_id(self.project_id or "", what="project_id")


_locks: dict[str, FileLock] = {}
_locks_guard = threading.Lock()
_thread_locks: dict[str, threading.RLock] = {}


class Store:
    def __init__(self, root: Path | str, lock_timeout: float = 30.0) -> None:
        self.root = Path(root)
        self.lock_timeout = lock_timeout

    # paths
    def user_dir(self, user_id: str) -> Path:
        return self.root / "users" / normalize_id(user_id, what="user_id")

    def profile_path(self, user_id: str) -> Path:
        return self.user_dir(user_id) / "memory.json"

    def facts_dir(self, bucket: Bucket) -> Path:
        if bucket.user_id is not None:
            return self.user_dir(bucket.user_id) / "agents" / normalize_agent(bucket.agent_name) / "facts"
        if not bucket.project_id:
            raise InvalidId("a card needs a user_id or a project_id")
        return self.root / "projects" / normalize_id(bucket.project_id, what="project_id") / "facts"

    def card_path(self, card: Card) -> Path:
        return self.path_for(Bucket.of(card), card.id)

    def path_for(self, bucket: Bucket, fact_id: str) -> Path:
        check_fact_id(fact_id)
        return self.facts_dir(bucket) / shard(fact_id) / f"{fact_id}.md"

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    # locking
    @contextmanager
    def lock(self, *buckets: Bucket) -> Iterator[None]:
        """Cross-process locks of the given users/projects, taken in a fixed order."""
        names = sorted({bucket.lock_name for bucket in buckets})
        held: list[FileLock | threading.RLock] = []
        try:
            for name in names:
                # The file lock is shared by the threads of a process (a second thread
                # would just bump its counter), so threads first take a per-name RLock:
                # reentrant for nested locking in one thread, exclusive between threads.
                lock, guard = self._lock_for(name), self._thread_lock_for(name)
                if not guard.acquire(timeout=self.lock_timeout):
                    raise LockTimeout(f"timed out waiting for the lock of {name}")
                held.append(guard)
                try:
                    lock.acquire(timeout=self.lock_timeout)
                except Timeout:
                    raise LockTimeout(f"timed out waiting for the lock of {name}") from None
                held.append(lock)
            yield
        finally:
            for lock in reversed(held):
                lock.release()

    @contextmanager
    def commit_gate(self, *, exclusive: bool = False) -> Iterator[None]:
        """Every commit holds this gate shared while it writes files and mirror; a rebuild
        holds it exclusively for its short final catch-up, so no commit can slip between
        the rebuild re-reading the files and applying what it read.

        Taken after the bucket locks (never the other way round), so it cannot deadlock
        with them. A fresh descriptor each time: flock locks belong to the open file, so
        threads and nested commits each hold their own share.
        """
        path = self.root / ".locks" / "commit-gate.lock"
        make_private_dirs(path.parent)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        try:
            deadline = time.monotonic() + self.lock_timeout
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LockTimeout("timed out waiting for a rebuild to finish its catch-up") from None
                    time.sleep(0.005)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _thread_lock_for(self, name: str) -> threading.RLock:
        key = str(self.root / ".locks" / f"{name}.lock")
        with _locks_guard:
            guard = _thread_locks.get(key)
            if guard is None:
                guard = _thread_locks[key] = threading.RLock()
            return guard

    def _lock_for(self, name: str) -> FileLock:
        path = self.root / ".locks" / f"{name}.lock"
        key = str(path)
        with _locks_guard:
            lock = _locks.get(key)
            if lock is None:
                make_private_dirs(path.parent)
                lock = FileLock(key, thread_local=False, mode=PRIVATE_FILE_MODE)
                _locks[key] = lock
            return lock

    # cards
    def read_card_at(self, path: Path) -> Card:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise CardParseError(path, "file is not valid UTF-8") from None
        return parse_card(text, path)

    def read_card(self, bucket: Bucket, fact_id: str) -> Card | None:
        path = self.path_for(bucket, fact_id)
        if not path.exists():
            return None
        return self.read_card_at(path)

    def write_card(self, card: Card) -> Path:
        path = self.card_path(card)
        atomic_write(path, dump_card(card))
        return path

    def delete_card(self, card: Card) -> bool:
        return remove_file(self.card_path(card))

    def card_files(self) -> Iterator[Path]:
        """Every card file under the root, in a stable order (temp files skipped)."""
        for top in ("users", "projects"):
            base = self.root / top
            if not base.is_dir():
                continue
            for dirpath, dirnames, filenames in os.walk(base):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                for name in sorted(filenames):
                    if name.endswith(".md") and not name.startswith("."):
                        yield Path(dirpath) / name

    def profile_files(self) -> Iterator[Path]:
        base = self.root / "users"
        if not base.is_dir():
            return
        for entry in sorted(base.iterdir()):
            path = entry / "memory.json"
            if path.is_file():
                yield path

    # profiles
    def read_profile(self, user_id: str) -> Profile:
        path = self.profile_path(user_id)
        if not path.exists():
            return Profile(user_id=user_id)
        return self.read_profile_at(path)

    def read_profile_at(self, path: Path) -> Profile:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise CardParseError(path, "file is not valid UTF-8") from None
        return parse_profile(text, path)

    def write_profile(self, profile: Profile) -> Path:
        path = self.profile_path(profile.user_id)
        atomic_write(path, dump_profile(profile))
        return path


def file_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def get_store() -> Store:
    from django.conf import settings

    return Store(settings.MEMORY_ROOT, lock_timeout=settings.MEMORY_LOCK_TIMEOUT)
