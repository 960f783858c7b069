"""What a turn is, and its validation before it is stored or run.

An agent's turn (user, agent, thread, optional project, its messages) is checked by
`clean_turn`: the ids, the message list and each message (its shape, size, id, and
what a stored turn may hold: `facts.sanitize`). Every message gets a stable id; the
`CleanTurn` it returns holds LangChain dicts ready to be stored.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from langchain_core.messages import BaseMessage, message_to_dict

from .filtering import text_of, to_message
from .sanitize import InvalidMessage, NonFinite, clean_value, has_control
from .store import InvalidId, normalize_agent, normalize_id


class TurnRejected(ValueError):
    """Bad input: `field` names what is wrong (for a 400 answer); str() is the whole text."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    @classmethod
    def from_lines(cls, lines: list[str]) -> TurnRejected:
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


def _required_id(field_name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TurnRejected(field_name, "a non-empty string is required")
    if len(value) > settings.API_MAX_ID_CHARS:
        raise TurnRejected(field_name, f"at most {settings.API_MAX_ID_CHARS} characters")
    if has_control(value):  # facts/sanitize.py: ids are refused, text is cleaned
        raise TurnRejected(field_name, "must not contain control characters")
    return value


def _stable_id(message: BaseMessage, seen: set[str]) -> str:
    """An id for a message that came without one: the same message posted twice gets the same id."""
    body = json.dumps([message.type, text_of(message.content)], ensure_ascii=False)
    base = "h-" + hashlib.sha256(body.encode()).hexdigest()[:20]
    candidate, n = base, 1
    while candidate in seen:
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def clean_turn(
    *,
    user_id: Any,
    agent_name: Any,
    thread_id: Any,
    project_id: Any = None,
    messages: Any,
) -> CleanTurn:
    """Validate a turn; raise `TurnRejected(field, message)` on the first problem."""
    user_id = _required_id("user_id", user_id)
    try:
        normalize_id(user_id, what="user_id")
    except InvalidId as exc:
        raise TurnRejected("user_id", str(exc)) from None
    if agent_name is not None and not isinstance(agent_name, str):
        raise TurnRejected("agent_name", "must be a string")
    try:
        agent = normalize_agent(agent_name)
    except InvalidId as exc:
        raise TurnRejected("agent_name", str(exc)) from None
    thread_id = _required_id("thread_id", thread_id)
    if project_id in (None, ""):
        project = ""
    else:
        project = _required_id("project_id", project_id)
        try:
            normalize_id(project, what="project_id")
        except InvalidId as exc:
            raise TurnRejected("project_id", str(exc)) from None
    if not isinstance(messages, list | tuple):
        raise TurnRejected("messages", "a list of messages is required")
    if len(messages) > settings.API_MAX_MESSAGES:
        raise TurnRejected("messages", f"at most {settings.API_MAX_MESSAGES} messages per turn")
    cleaned: list[dict[str, Any]] = []
    ids: list[str] = []
    seen: set[str] = set()
    for index, raw in enumerate(messages):
        where = f"messages[{index}]"
        try:
            message = to_message(raw)
        except InvalidMessage as exc:
            raise TurnRejected.from_lines(exc.lines(("messages", index))) from None
        except ValueError as exc:
            raise TurnRejected(where, str(exc)[:300]) from None
        if len(text_of(message.content)) > settings.API_MAX_MESSAGE_CHARS:
            raise TurnRejected(where, f"content longer than {settings.API_MAX_MESSAGE_CHARS} characters")
        if message.id is not None and (not isinstance(message.id, str) or len(message.id) > 200):
            raise TurnRejected(f"{where}.id", "at most 200 characters")
        if message.id and has_control(message.id):
            raise TurnRejected(f"{where}.id", "must not contain control characters")
        if not message.id:
            message = message.model_copy(update={"id": _stable_id(message, seen)})
        elif message.id in seen:
            continue  # the same message twice in one turn
        seen.add(message.id)
        ids.append(message.id)
        stored = message_to_dict(message)
        try:
            # Control characters out of every string, NaN/Infinity refused (facts/sanitize.py).
            stored["data"] = clean_value(stored["data"], ("messages", index))
        except NonFinite as exc:
            raise TurnRejected(
                exc.path, "NaN and Infinity are not JSON numbers; send a finite number or null"
            ) from None
        cleaned.append(stored)
    return CleanTurn(user_id, agent, thread_id, project, cleaned, ids)
