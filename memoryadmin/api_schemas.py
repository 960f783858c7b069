"""Request bodies and parameters of the agents' API: parsing and validation.

Everything an agent sends is checked here, before any memory code sees it (a turn
by the one validation every door uses, `facts.intake.turns.clean_turn`); every problem
becomes a `BadRequest` naming the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from facts.intake import turns
from facts.intake.sanitize import MAX_JSON_DEPTH, NotJson, check_json
from facts.intake.turns import CleanTurn, TurnRejected
from retrieval.limits import clamp_limit

MAX_QUERY_CHARS = 2000
MODES = ("auto", "tool")


class BadRequest(Exception):
    def __init__(self, field: str, message: str, *, code: str = "invalid_field") -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.code = code
        self.text = f"{field}: {message}"

    @classmethod
    def of(cls, exc: TurnRejected | NotJson) -> BadRequest:
        """The write side's refusal as the API answers it (several problems of one
        message are one short line each)."""
        if isinstance(exc, NotJson):
            return cls(exc.field, exc.message, code="malformed" if exc.malformed else "invalid_field")
        bad = cls(exc.field, exc.message, code=exc.code)
        bad.text = str(exc)
        return bad


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
    try:
        check_json(data)
    except NotJson as exc:
        raise BadRequest.of(exc) from None
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


# --- ids -------------------------------------------------------------------------


def clean_id(field: str, value: Any, *, required: bool) -> str | None:
    """A user, thread or project id, by the write side's rule for agents (`facts.intake.turns.clean_id`)."""
    try:
        return turns.clean_id(field, value, required=required, allow_paths=False)
    except TurnRejected as exc:
        raise BadRequest.of(exc) from None


def clean_agent(value: Any) -> str:
    try:
        return turns.clean_agent(value)
    except TurnRejected as exc:
        raise BadRequest.of(exc) from None


# --- bodies ------------------------------------------------------------------------


def parse_turn(data: dict[str, Any]) -> CleanTurn:
    """The turn of a request body, through the one validation every door uses
    (`facts.intake.turns.clean_turn`)."""
    try:
        return turns.clean_turn(
            user_id=data.get("user_id"),
            agent_name=data.get("agent_name"),
            thread_id=data.get("thread_id"),
            project_id=data.get("project_id"),
            messages=data.get("messages"),
            created_at=data.get("created_at"),
            allow_paths=False,
        )
    except TurnRejected as exc:
        raise BadRequest.of(exc) from None


# --- query parameters ----------------------------------------------------------------


@dataclass(frozen=True)
class ScopeParams:
    user_id: str
    agent_name: str
    project_id: str | None

    def as_tuple(self) -> tuple[str, str, str | None]:
        return self.user_id, self.agent_name, self.project_id


def parse_scope(params: Any, *, require_agent: bool = False) -> ScopeParams:
    """The caller's user × agent (× project). `require_agent`: reads name their agent
    (`__default__` for the bucket of turns sent without one), so a forgotten parameter
    is a 400, not an empty memory."""
    for name in ("user_id", "agent_name", "project_id"):
        if len(params.getlist(name)) > 1:
            raise BadRequest(name, "is given more than once")
    user_id = clean_id("user_id", params.get("user_id"), required=True)
    if require_agent and not (params.get("agent_name") or "").strip():
        raise BadRequest(
            "agent_name", "is required (`__default__` reads the turns sent without one)", code="missing_field"
        )
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
