"""What a turn is, and the one validation every door puts it through.

An agent's turn (user, agent, thread, optional project, its messages) reaches memory
through the HTTP API, the in-process LangChain middleware or the ``ingest`` command;
each of them calls `clean_turn`, so the same input is refused with the same words
everywhere (the API answers them as 400s). `clean_turn` checks the ids, the message
list and each message (its shape, id, size, and what a stored turn may hold:
`facts.intake.sanitize`), gives every message a stable id, and returns a `CleanTurn` whose
messages are LangChain dicts ready to be stored.

When it was said (issue 35): a turn may carry ``created_at`` and each message its own
(a role dict's ``created_at``, which LangChain keeps in ``additional_kwargs``, or
``additional_kwargs.created_at`` of a LangChain message). `clean_said_at` is the rule:
ISO 8601 with its offset (``Z`` or ``+02:00``); no later than `FUTURE_TOLERANCE` past
this server's clock, no earlier than 1970; naive or unparsable times are refused.
Every stored message then carries its time, normalized to UTC
(``additional_kwargs.created_at``: its own, else the turn's), and `said_times` reads
them back for the pipeline: a card takes the time of its evidence message as its
``created_at``. A message without one is dated when it is extracted, as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypedDict

from django.conf import settings
from langchain_core.messages import BaseMessage, message_to_dict
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from facts.intake.filtering import text_of, to_message
from facts.intake.sanitize import InvalidMessage, NotJson, check_json, clean_value, error_lines, has_control
from facts.storage.errors import InvalidId
from facts.storage.ids import normalize_agent, normalize_id


class TurnRejected(ValueError):
    """Bad input: `field` names what is wrong, `code` is the API's error code
    (``invalid_field``, ``missing_field`` or ``malformed``); str() is the whole text."""

    def __init__(self, field: str, message: str, *, code: str = "invalid_field") -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.code = code

    @classmethod
    def from_lines(cls, lines: list[str]) -> TurnRejected:
        """Several problems of one message (pydantic's errors), one short line each."""
        field, _, message = lines[0].partition(": ")
        exc = cls(field, message)
        exc.args = ("; ".join(lines),)
        return exc


@dataclass
class CleanTurn:
    user_id: str
    agent_name: str
    thread_id: str
    project_id: str
    messages: list[dict[str, Any]]  # LangChain dicts, every message with an id
    message_ids: list[str]

    def thread(self) -> ThreadKey:
        """The (user, agent, thread) its turns are queued and merged by, as model fields."""
        return {"user_id": self.user_id, "agent_name": self.agent_name, "thread_id": self.thread_id}


class ThreadKey(TypedDict):
    """What a turn's thread is keyed by, as model fields."""

    user_id: str
    agent_name: str
    thread_id: str


class MessageIn(BaseModel):
    """The shape of one message sent as a role dict (OpenAI's and LangChain's roles)."""

    model_config = ConfigDict(extra="allow")

    # Optional: a stable id is derived from the content when it is missing.
    id: str | None = Field(default=None, min_length=1, max_length=200)
    role: Literal["user", "assistant", "system", "developer", "tool", "function", "human", "ai"]
    # LangChain's own shape: a string or a list of content blocks (strings or objects).
    content: str | list[str | dict[str, Any]] = ""
    additional_kwargs: dict[str, Any] = Field(default_factory=dict)
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)


# --- ids ---------------------------------------------------------------------------


def clean_id(field: str, value: Any, *, required: bool, allow_paths: bool = True) -> str | None:
    """A user, thread or project id as sent (None when absent and not required).

    Ids are stored hashed on disk whatever they contain; one carrying a control
    character is refused. The agents' doors (the API, the middleware) pass
    ``allow_paths=False``: from an agent, an id that looks like a path is a client bug,
    while an import (``ingest``) keeps the ids of the system it comes from.
    """
    if value is None or value == "":
        if required:
            raise TurnRejected(field, "is required", code="missing_field")
        return None
    if not isinstance(value, str):
        raise TurnRejected(field, "must be a string")
    if len(value) > settings.API_MAX_ID_CHARS:
        raise TurnRejected(field, f"is longer than {settings.API_MAX_ID_CHARS} characters")
    path_like = "/" in value or "\\" in value or value.strip(".") == ""
    if not allow_paths and (path_like or has_control(value)):
        raise TurnRejected(field, "must not contain '/', '\\', control characters, or be only dots")
    if has_control(value):
        raise TurnRejected(field, "must not contain control characters")
    try:
        check_json(value)
        normalize_id(value, what=field)
    except NotJson as exc:
        raise _not_json(exc) from None
    except InvalidId as exc:
        raise TurnRejected(field, str(exc)) from None
    return value


def clean_agent(value: Any) -> str:
    """The agent's bucket name (``__default__`` when there is none)."""
    if value is not None and not isinstance(value, str):
        raise TurnRejected("agent_name", "must be a string")
    try:
        return normalize_agent(value)
    except InvalidId as exc:
        raise TurnRejected("agent_name", str(exc)) from None


def _not_json(exc: NotJson) -> TurnRejected:
    return TurnRejected(exc.field, exc.message, code="malformed" if exc.malformed else "invalid_field")


# --- when it was said ----------------------------------------------------------------

# How far past this server's clock a said-at time may be: the agents' clocks drift a
# little (five minutes is what Kerberos allows), but a time further ahead is a client
# bug (a local time sent as UTC, milliseconds read as seconds) and would make a card
# look newer than everything the user says next.
FUTURE_TOLERANCE = timedelta(minutes=5)
# Older is fine (backfills of old conversations); before the Unix epoch is a bug (a
# zero timestamp, a year typed as 0024).
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
SAID_AT = "created_at"  # the key, in a turn and in a message's additional_kwargs
_FORMAT = "an ISO 8601 time with its offset, e.g. 2024-05-01T09:30:00+02:00 or 2024-05-01T07:30:00Z"


def clean_said_at(field: str, value: Any, *, now: datetime | None = None) -> datetime | None:
    """When something was said, in UTC to the second (None when absent); `TurnRejected`
    names `field` when it is not a time this memory can believe."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):  # handed over in process
        said = value
    elif isinstance(value, str):
        try:
            said = datetime.fromisoformat(value.strip())
        except ValueError:
            raise TurnRejected(field, f"{value[:40]!r} is not {_FORMAT}") from None
    else:
        raise TurnRejected(field, f"must be a string: {_FORMAT}")
    if said.tzinfo is None or said.utcoffset() is None:
        raise TurnRejected(field, f"{str(value)[:40]!r} has no time zone: add Z or an offset like +02:00")
    try:
        said = said.astimezone(UTC).replace(microsecond=0)
    except OverflowError:  # year 1 or 9999 pushed past the calendar by its offset
        raise TurnRejected(field, f"{str(value)[:40]!r} is out of range") from None
    now = now or datetime.now(UTC)
    if said > now + FUTURE_TOLERANCE:
        raise TurnRejected(
            field,
            f"{_iso(said)} is in the future (more than {FUTURE_TOLERANCE.seconds // 60} minutes "
            f"after this server's clock, {_iso(now.replace(microsecond=0))})",
        )
    if said < EARLIEST:
        raise TurnRejected(field, f"{_iso(said)} is before {_iso(EARLIEST)}")
    return said


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def said_times(messages: Iterable[BaseMessage]) -> dict[str, datetime]:
    """Message id → when it was said, for the messages that carry a time (as
    `clean_turn` stored it; anything else there is ignored, never trusted)."""
    out: dict[str, datetime] = {}
    for message in messages:
        value = (message.additional_kwargs or {}).get(SAID_AT)
        if not message.id or not isinstance(value, str):
            continue
        try:
            said = datetime.fromisoformat(value)
        except ValueError:
            continue
        if said.tzinfo is not None:
            out[message.id] = said.astimezone(UTC)
    return out


# --- messages ----------------------------------------------------------------------


def _stable_id(message: BaseMessage, seen: set[str]) -> str:
    """An id for a message that came without one: the same message posted twice gets the same id."""
    body = json.dumps([message.type, text_of(message.content)], ensure_ascii=False)
    base = "h-" + hashlib.sha256(body.encode()).hexdigest()[:20]
    candidate, n = base, 1
    while candidate in seen:
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def _message(raw: Any, index: int) -> BaseMessage:
    """One message as LangChain's object, from an object, a role dict or LangChain's dict."""
    where = f"messages[{index}]"
    if isinstance(raw, BaseMessage):
        return raw  # handed over in process
    if not isinstance(raw, Mapping):
        raise TurnRejected(where, "must be an object")
    if "role" in raw:
        try:
            MessageIn.model_validate(raw)
        except ValidationError as exc:
            raise TurnRejected.from_lines(error_lines(exc.errors(), ("messages", index))) from None
    try:
        return to_message(raw)
    except InvalidMessage as exc:
        raise TurnRejected.from_lines(exc.lines(("messages", index))) from None
    except ValueError as exc:
        raise TurnRejected(where, str(exc)[:300]) from None


def _size(content: Any) -> int:
    return len(content) if isinstance(content, str) else len(json.dumps(content, default=str))


def clean_turn(
    *,
    user_id: Any,
    agent_name: Any,
    thread_id: Any,
    project_id: Any = None,
    messages: Any,
    created_at: Any = None,
    allow_paths: bool = True,
    now: datetime | None = None,
) -> CleanTurn:
    """Validate a turn; raise `TurnRejected(field, message)` on the first problem.

    `created_at` is when the turn was said (each message may say its own; see the
    module's docstring), checked against `now` (the clock). `allow_paths=False` for the
    agents' doors: see `clean_id`."""
    user = clean_id("user_id", user_id, required=True, allow_paths=allow_paths)
    agent = clean_agent(agent_name)
    thread = clean_id("thread_id", thread_id, required=True, allow_paths=allow_paths)
    project = clean_id("project_id", project_id, required=False, allow_paths=allow_paths) or ""
    now = now or datetime.now(UTC)
    turn_said = clean_said_at(SAID_AT, created_at, now=now)
    if messages is None:
        raise TurnRejected("messages", "is required", code="missing_field")
    if not isinstance(messages, list | tuple):
        raise TurnRejected("messages", "must be a list")
    if not messages:
        raise TurnRejected("messages", "must not be empty")
    if len(messages) > settings.API_MAX_MESSAGES:
        raise TurnRejected("messages", f"holds more than {settings.API_MAX_MESSAGES} messages")
    max_chars = settings.API_MAX_MESSAGE_CHARS
    cleaned: list[dict[str, Any]] = []
    ids: list[str] = []
    seen: set[str] = set()
    for index, raw in enumerate(messages):
        where = f"messages[{index}]"
        message = _message(raw, index)
        if message.id is not None and (not isinstance(message.id, str) or len(message.id) > 200):
            raise TurnRejected(f"{where}.id", "at most 200 characters")
        if message.id and has_control(message.id):
            raise TurnRejected(f"{where}.id", "must not contain control characters")
        if message.id and message.id in seen:
            raise TurnRejected(f"{where}.id", f"repeats the id {message.id!r} of an earlier message")
        if _size(message.content) > max_chars:
            raise TurnRejected(f"{where}.content", f"is longer than {max_chars} characters")
        if not message.id:
            message = message.model_copy(update={"id": _stable_id(message, seen)})
        extra = message.additional_kwargs or {}
        said = clean_said_at(f"{where}.{SAID_AT}", extra.get(SAID_AT), now=now) or turn_said
        if said is not None:
            message = message.model_copy(update={"additional_kwargs": {**extra, SAID_AT: _iso(said)}})
        seen.add(message.id)
        ids.append(message.id)
        stored = message_to_dict(message)
        try:
            # What a stored turn may hold (facts/intake/sanitize.py): JSON only (finite numbers,
            # not too deep, valid Unicode); control characters out of every string.
            check_json(stored["data"], ("messages", index))
        except NotJson as exc:
            raise _not_json(exc) from None
        stored["data"] = clean_value(stored["data"])
        cleaned.append(stored)
    return CleanTurn(str(user), agent, str(thread), project, cleaned, ids)
