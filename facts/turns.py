"""What a turn is, and the one validation every door puts it through.

An agent's turn (user, agent, thread, optional project, its messages) reaches memory
through the HTTP API, the in-process LangChain middleware or the ``ingest`` command;
each of them calls `clean_turn`, so the same input is refused with the same words
everywhere (the API answers them as 400s). `clean_turn` checks the ids, the message
list and each message (its shape, id, size, and what a stored turn may hold:
`facts.sanitize`), gives every message a stable id, and returns a `CleanTurn` whose
messages are LangChain dicts ready to be stored.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from django.conf import settings
from langchain_core.messages import BaseMessage, message_to_dict
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import InvalidId
from .filtering import text_of, to_message
from .ids import normalize_agent, normalize_id
from .sanitize import InvalidMessage, NotJson, check_json, clean_value, error_lines, has_control


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

    def thread(self) -> dict[str, str]:
        """The (user, agent, thread) its turns are queued and merged by, as model fields."""
        return {"user_id": self.user_id, "agent_name": self.agent_name, "thread_id": self.thread_id}


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
    allow_paths: bool = True,
) -> CleanTurn:
    """Validate a turn; raise `TurnRejected(field, message)` on the first problem.

    `allow_paths=False` for the agents' doors: see `clean_id`."""
    user = clean_id("user_id", user_id, required=True, allow_paths=allow_paths)
    agent = clean_agent(agent_name)
    thread = clean_id("thread_id", thread_id, required=True, allow_paths=allow_paths)
    project = clean_id("project_id", project_id, required=False, allow_paths=allow_paths) or ""
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
        seen.add(message.id)
        ids.append(message.id)
        stored = message_to_dict(message)
        try:
            # What a stored turn may hold (facts/sanitize.py): JSON only (finite numbers,
            # not too deep, valid Unicode); control characters out of every string.
            check_json(stored["data"], ("messages", index))
        except NotJson as exc:
            raise _not_json(exc) from None
        stored["data"] = clean_value(stored["data"])
        cleaned.append(stored)
    return CleanTurn(str(user), agent, str(thread), project, cleaned, ids)
