"""Request bodies and parameters of the agents' API: parsing and validation.

Everything an agent sends is checked here, before any memory code sees it; every
problem becomes a `BadRequest` naming the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from facts.errors import InvalidId
from facts.ids import normalize_agent, normalize_id
from facts.sanitize import error_lines, has_control, path_text
from retrieval.limits import clamp_limit

MAX_JSON_DEPTH = 32
MAX_QUERY_CHARS = 2000
MODES = ("auto", "tool")
ROLES = ("user", "assistant", "system", "developer", "tool", "function", "human", "ai")


class BadRequest(Exception):
    def __init__(self, field: str, message: str, *, code: str = "invalid_field") -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.code = code
        self.text = f"{field}: {message}"

    @classmethod
    def from_lines(cls, lines: list[str]) -> BadRequest:
        """Several problems (pydantic's errors of one message), one short line each."""
        field, _, message = lines[0].partition(": ")
        exc = cls(field, message)
        exc.text = "; ".join(lines)
        return exc


class TooLarge(Exception):
    pass


# --- raw body ----------------------------------------------------------------------


def read_json_body(request: Any) -> dict[str, Any]:
    """The body as a JSON object, with the size, encoding and depth limits applied."""
    limit = int(settings.API_MAX_BODY_BYTES)
    declared = request.META.get("CONTENT_LENGTH") or ""
    if not declared and "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
        raw = _read_chunked(request, limit)
    else:
        try:
            declared_size = int(declared or "0")
        except ValueError:
            raise BadRequest("Content-Length", "is not a number", code="malformed") from None
        if declared_size > limit:
            raise TooLarge
        # Read at most one byte more than allowed: the real size counts, whatever the header said.
        raw = request.read(limit + 1)
        if len(raw) > limit:
            raise TooLarge
    content_type = request.META.get("CONTENT_TYPE", "")
    if content_type and not content_type.split(";")[0].strip().lower().endswith("json"):
        raise BadRequest("Content-Type", "must be application/json", code="malformed")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest("body", f"is not valid UTF-8 (byte {exc.start})", code="malformed") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise BadRequest("body", f"JSON nested deeper than {MAX_JSON_DEPTH} levels", code="malformed") from None
    except ValueError as exc:
        raise BadRequest("body", f"is not valid JSON ({exc})", code="malformed") from None
    check_json_value(data)
    if not isinstance(data, dict):
        raise BadRequest("body", "must be a JSON object", code="malformed")
    return data


CHUNK_BYTES = 64 * 1024


def _read_chunked(request: Any, limit: int) -> bytes:
    """A ``Transfer-Encoding: chunked`` body, read piece by piece up to `limit`.

    Django reads a request without Content-Length as empty (its stream is limited to
    the declared length, 0), so a chunked body is read from the WSGI input itself. Only
    when the server says that input ends with the body (``wsgi.input_terminated``, set
    by gunicorn, which removes the chunk framing): reading a raw socket to its end would
    wait for a keep-alive client forever. TooLarge as soon as the limit is passed; the
    rest is never read into memory.
    """
    if not request.environ.get("wsgi.input_terminated"):
        raise BadRequest(
            "Content-Length", "is required by this server (it cannot read chunked bodies)", code="malformed"
        )
    stream = request.environ["wsgi.input"]
    parts: list[bytes] = []
    size = 0
    while True:
        piece = stream.read(min(CHUNK_BYTES, limit + 1 - size))
        if not piece:
            return b"".join(parts)
        parts.append(piece)
        size += len(piece)
        if size > limit:
            raise TooLarge


def check_json_value(data: Any) -> None:
    """Reject nesting deeper than MAX_JSON_DEPTH, strings that are not valid Unicode
    (JSON's ``\\ud800`` escapes decode to lone surrogates that cannot be stored), and
    numbers that are not finite: Python's parser takes ``NaN``, ``Infinity`` and ``1e999``,
    which are not JSON and which no JSON column can store. The error names the place."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            _check_text(value)
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                name = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
                raise BadRequest(
                    path_text(path) or "body", f"{name} is not a JSON number; send a finite number or null"
                )
            continue
        if isinstance(value, dict):
            children: Any = value.items()
        elif isinstance(value, list):
            children = enumerate(value)
        else:
            continue
        if len(path) >= MAX_JSON_DEPTH:
            raise BadRequest("body", f"JSON nested deeper than {MAX_JSON_DEPTH} levels", code="malformed")
        for key, item in children:
            if isinstance(key, str):
                _check_text(key)
            if isinstance(item, (dict, list, str, float)):
                stack.append((item, (*path, key)))


def _check_text(value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(
            "body", "contains a string that is not valid Unicode (lone surrogate)", code="malformed"
        ) from None


# --- ids -------------------------------------------------------------------------


def clean_id(field: str, value: Any, *, required: bool) -> str | None:
    """A user, thread or project id as sent, after the API's own stricter checks.

    Ids are stored hashed on disk whatever they contain, but the API refuses ids that
    look like paths or carry control characters: they are always a client bug.
    """
    if value is None or value == "":
        if required:
            raise BadRequest(field, "is required", code="missing_field")
        return None
    if not isinstance(value, str):
        raise BadRequest(field, "must be a string")
    if len(value) > int(settings.API_MAX_ID_CHARS):
        raise BadRequest(field, f"is longer than {settings.API_MAX_ID_CHARS} characters")
    if has_control(value) or "/" in value or "\\" in value or value.strip(".") == "":
        raise BadRequest(field, "must not contain '/', '\\', control characters, or be only dots")
    _check_text(value)
    try:
        normalize_id(value, what=field)
    except InvalidId as exc:
        raise BadRequest(field, str(exc)) from None
    return value


def clean_agent(value: Any) -> str:
    if value is not None and not isinstance(value, str):
        raise BadRequest("agent_name", "must be a string")
    try:
        return normalize_agent(value)
    except InvalidId as exc:
        raise BadRequest("agent_name", str(exc)) from None


# --- bodies ------------------------------------------------------------------------


class MessageIn(BaseModel):
    """One message of a turn, in LangChain's terms (roles user/assistant/system/tool)."""

    model_config = ConfigDict(extra="allow")

    # Optional: the write side derives a stable id from the content when it is missing.
    id: str | None = Field(default=None, min_length=1, max_length=200)
    role: Literal["user", "assistant", "system", "developer", "tool", "function", "human", "ai"]
    # LangChain's own shape: a string or a list of content blocks (strings or objects).
    content: str | list[str | dict[str, Any]] = ""
    additional_kwargs: dict[str, Any] = Field(default_factory=dict)
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)


@dataclass(frozen=True)
class TurnRequest:
    user_id: str
    agent_name: str
    thread_id: str
    project_id: str | None
    messages: list[dict[str, Any]]


def parse_turn(data: dict[str, Any]) -> TurnRequest:
    user_id = clean_id("user_id", data.get("user_id"), required=True)
    agent_name = clean_agent(data.get("agent_name"))
    thread_id = clean_id("thread_id", data.get("thread_id"), required=True)
    project_id = clean_id("project_id", data.get("project_id"), required=False)
    messages = data.get("messages")
    if messages is None:
        raise BadRequest("messages", "is required", code="missing_field")
    if not isinstance(messages, list):
        raise BadRequest("messages", "must be a list")
    if not messages:
        raise BadRequest("messages", "must not be empty")
    if len(messages) > int(settings.API_MAX_MESSAGES):
        raise BadRequest("messages", f"holds more than {settings.API_MAX_MESSAGES} messages")
    cleaned: list[dict[str, Any]] = []
    seen: set[str] = set()
    max_chars = int(settings.API_MAX_MESSAGE_CHARS)
    for index, raw in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(raw, dict):
            raise BadRequest(where, "must be an object")
        try:
            message = MessageIn.model_validate(raw)
        except ValidationError as exc:
            raise BadRequest.from_lines(error_lines(exc.errors(), ("messages", index))) from None
        if message.id is not None and message.id in seen:
            raise BadRequest(f"{where}.id", f"repeats the id {message.id!r} of an earlier message")
        seen.add(message.id)
        size = len(message.content) if isinstance(message.content, str) else len(json.dumps(message.content))
        if size > max_chars:
            raise BadRequest(f"{where}.content", f"is longer than {max_chars} characters")
        cleaned.append(raw)
    return TurnRequest(str(user_id), agent_name, str(thread_id), project_id, cleaned)


# --- query parameters ----------------------------------------------------------------


@dataclass(frozen=True)
class ScopeParams:
    user_id: str
    agent_name: str
    project_id: str | None


def parse_scope(params: Any) -> ScopeParams:
    for name in ("user_id", "agent_name", "project_id"):
        if len(params.getlist(name)) > 1:
            raise BadRequest(name, "is given more than once")
    user_id = clean_id("user_id", params.get("user_id"), required=True)
    agent_name = clean_agent(params.get("agent_name"))
    project_id = clean_id("project_id", params.get("project_id"), required=False)
    return ScopeParams(str(user_id), agent_name, project_id)


def parse_mode(params: Any) -> str:
    mode = params.get("mode") or "auto"
    if mode not in MODES:
        raise BadRequest("mode", "must be 'auto' or 'tool'")
    return mode


def parse_search(params: Any) -> tuple[str, int]:
    query = params.get("q")
    if query is None or not query.strip():
        raise BadRequest("q", "is required", code="missing_field")
    if len(query) > MAX_QUERY_CHARS:
        raise BadRequest("q", f"is longer than {MAX_QUERY_CHARS} characters")
    if "\x00" in query:
        raise BadRequest("q", "contains a NUL character")
    raw_limit = params.get("limit") or "5"
    try:
        limit = int(raw_limit)
    except ValueError:
        raise BadRequest("limit", "must be an integer") from None
    return query, clamp_limit(limit)
