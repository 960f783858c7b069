"""MCP over Streamable HTTP at ``/mcp``, on the same WSGI server as the dashboard and API.

The SDK's HTTP transport is an ASGI app; the web servers here (waitress, gunicorn) are
WSGI. A Django view does what every agents' endpoint does — bearer key, per-address
failure throttle, per-key rate limit, the key's agent and user limits, the project's
tenant (`facts.tenancy`) — and then hands
the request to the SDK's app through a2wsgi's ASGI→WSGI adapter. The identity it
checked travels in the WSGI environ (a key no HTTP header can produce) to the tools.
The SDK is imported on the first MCP request, so the dashboard's start does not pay for it.

Who the caller acts for comes from headers, as the JSON API takes it from the body or
the query: ``X-Memory-User`` (required), ``X-Memory-Agent``, ``X-Memory-Project``.

The SDK runs stateless with JSON responses: every POST is answered on its own, so any
thread of any worker process can serve it (gunicorn runs several) and no long-lived
stream holds a thread. One event loop per process, in a daemon thread, runs the SDK's
session manager; it is started on the first MCP request (after a fork, never before).
"""

from __future__ import annotations

import asyncio
import functools
import io
import json
import logging
import threading
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from facts import tenancy

from . import api_auth
from .api_schemas import BadRequest, clean_agent, clean_id

if TYPE_CHECKING:
    from .mcp_server import Identity

log = logging.getLogger(__name__)

ENVIRON_KEY = "memoryadmin.mcp.identity"
USER_HEADER, AGENT_HEADER, PROJECT_HEADER = "X-Memory-User", "X-Memory-Agent", "X-Memory-Project"
# JSON-RPC's range for implementation-defined server errors.
AUTH_ERROR = -32001


def identity_from_environ(ctx: Any) -> Identity:
    from .mcp_server import Identity

    request = ctx.request_context.request
    identity = getattr(request, "scope", {}).get("wsgi_environ", {}).get(ENVIRON_KEY)
    if not isinstance(identity, Identity):
        # Only reachable if the SDK app were served without the view in front of it.
        raise PermissionError("MCP request without an authenticated identity")
    return identity


class _Bridge:
    """The SDK's ASGI app, its session manager running on a loop of its own, and the
    a2wsgi adapter in front of it."""

    def __init__(self) -> None:
        from a2wsgi import ASGIMiddleware
        from mcp.server.transport_security import TransportSecuritySettings

        from .mcp_server import build_server

        self.server = build_server(identity_from_environ)
        app = self.server.streamable_http_app(
            streamable_http_path="/mcp",
            stateless_http=True,
            json_response=True,
            max_request_body_size=int(settings.API_MAX_BODY_BYTES),
            # Django has already checked the Host (ALLOWED_HOSTS), and a browser page on
            # another origin cannot send the bearer key, so the SDK's own DNS-rebinding
            # check (which only knows 127.0.0.1/localhost) would only refuse real hosts.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="mcp-loop", daemon=True).start()
        ready = threading.Event()

        async def run_manager() -> None:
            async with self.server.session_manager.run():
                ready.set()
                await asyncio.Event().wait()  # for the life of the process

        self.loop.call_soon_threadsafe(lambda: self.loop.create_task(run_manager()))
        if not ready.wait(30):
            raise RuntimeError("the MCP session manager did not start")
        # Starlette's ASGI callable is typed more loosely than a2wsgi's (the same protocol).
        self.wsgi = ASGIMiddleware(app, loop=self.loop)  # type: ignore[arg-type]


_bridge_lock = threading.Lock()


def bridge() -> _Bridge:
    """The process's one bridge. Made under a lock: two bridges would each hold MCP
    sessions the other does not know."""
    with _bridge_lock:
        return _the_bridge()


@functools.cache
def _the_bridge() -> _Bridge:
    return _Bridge()


def _error(status: int, code: str, message: str, **headers: str) -> HttpResponse:
    """A JSON-RPC error (no id: the request was never read) that MCP clients show."""
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": AUTH_ERROR, "message": message, "data": {"code": code}}}
    response = HttpResponse(json.dumps(body), status=status, content_type="application/json")
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


def _identity(request: HttpRequest, key: Any) -> Identity:
    from .mcp_server import Identity

    user_id = clean_id(USER_HEADER, request.headers.get(USER_HEADER), required=True)
    agent = clean_agent(request.headers.get(AGENT_HEADER))
    project_id = clean_id(PROJECT_HEADER, request.headers.get(PROJECT_HEADER), required=False)
    return Identity(
        user_id=str(user_id),
        agent_name=agent,
        project_id=project_id,
        actor=f"key:{key.name}",
        key_id=str(key.pk),
        key_agents=tuple(key.allowed_agents or ()),
    )


@csrf_exempt
def endpoint(request: HttpRequest) -> HttpResponse:
    """The MCP endpoint: authenticate as the JSON API does, then let the SDK answer."""
    if request.method != "POST":
        # The spec's answer when a server offers no GET stream. Stateless, the SDK would
        # open one that never carries anything, and hold a thread for as long as the
        # client keeps it; there are no sessions to DELETE either.
        return _error(405, "method_not_allowed", "use POST for this endpoint", Allow="POST")
    try:
        key = api_auth.admit(request)
    except api_auth.Refused as refused:
        return _error(refused.status, refused.code, refused.message, **refused.headers)
    try:
        identity = _identity(request, key)
    except BadRequest as exc:
        return _error(400, exc.code, exc.text)
    if not key.allows(identity.agent_name):
        return _error(403, "agent_not_allowed", f"this key may not act for the agent {identity.agent_name!r}")
    if not key.allows_user(identity.user_id):
        return _error(403, "user_not_allowed", f"this key may not act for the user {identity.user_id!r}")
    try:
        tenancy.check(identity.user_id, identity.project_id)
    except tenancy.ProjectNotAllowed as exc:
        return _error(403, exc.code, f"{PROJECT_HEADER}: {exc.message}")
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if not declared.isdigit() or int(declared) > int(settings.API_MAX_BODY_BYTES):
        return _error(413, "too_large", f"the body is larger than {settings.API_MAX_BODY_BYTES} bytes")
    body = request.body
    # META is the WSGI environ (and, under ASGI, its equivalent): a2wsgi builds the scope from it.
    environ = dict(request.META)
    environ.update({"wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body)), ENVIRON_KEY: identity})
    for name in ("SERVER_PORT", "REMOTE_PORT"):  # an ASGI server may leave them unknown ("None")
        if not str(environ.get(name, "0")).isdigit():
            environ[name] = "0"
    return _forward(environ)


def _forward(environ: dict[str, Any]) -> HttpResponse:
    started: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        started["status"], started["headers"] = int(status.split(" ", 1)[0]), headers

    # JSON responses: the whole answer is one body, collected before Django sends it.
    # A WSGI environ and start_response, typed as Django and this module hold them.
    content = b"".join(bridge().wsgi(environ, start_response))  # type: ignore[arg-type]
    response = HttpResponse(content, status=started.get("status", 500))
    for name, value in started.get("headers", []):
        if name.lower() not in ("content-length", "connection", "transfer-encoding"):
            response[name] = value
    return response
