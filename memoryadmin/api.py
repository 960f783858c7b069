"""The agents' HTTP API under /api/v1/: JSON in and out, bearer API keys.

Bearer-authenticated and never session-authenticated, hence CSRF-exempt. Every error
is ``{"error": {"code", "message"}}`` with its status (see memoryadmin/openapi.py).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from facts import tenancy
from facts.erasure.guard import ErasureInProgress
from retrieval.indexdb import IndexUnavailable

from . import api_auth, api_service
from .api_schemas import BadRequest, TooLarge, parse_mode, parse_scope, parse_search, parse_turn, read_json_body
from .models import ApiKey

log = logging.getLogger(__name__)

View = Callable[..., HttpResponse]


def error(status: int, code: str, message: str, **headers: str) -> JsonResponse:
    response = JsonResponse({"error": {"code": code, "message": message}}, status=status)
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


def api_endpoint(*methods: str) -> Callable[[View], View]:
    """Method check → bearer key → rate limit → the view (with `request.api_key` set);
    what the view raises becomes its answer: BadRequest 400, a project of another tenant
    403, an unknown agent 404, an erasure under way 409, TooLarge 413, an index being
    rebuilt 503."""

    def decorate(view: View) -> View:
        @csrf_exempt
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in methods:
                return error(
                    405, "method_not_allowed", f"use {' or '.join(methods)} for this endpoint", Allow=", ".join(methods)
                )
            try:
                key = api_auth.admit(request)
            except api_auth.Refused as refused:
                return error(refused.status, refused.code, refused.message, **refused.headers)
            request.api_key = key  # type: ignore[attr-defined]
            try:
                return view(request, *args, **kwargs)
            except TooLarge:
                return error(413, "too_large", f"the body is larger than {_max_body()} bytes")
            except BadRequest as exc:
                return error(400, exc.code, exc.text)
            except tenancy.ProjectNotAllowed as exc:
                return error(403, exc.code, exc.message)
            except api_service.UnknownAgent as exc:
                return error(404, exc.code, exc.message)
            except ErasureInProgress as exc:
                # Refused, not stored: the user is being forgotten. Retrying after the
                # erasure ends starts a new memory.
                return error(409, "erasure_in_progress", str(exc))
            except IndexUnavailable as exc:
                # Loud, never an empty 200: the agent retries, or answers without memory.
                return error(503, "index_unavailable", exc.message, Retry_After="5")
            except Exception:
                # JSON for agents too; MemoryClient treats 5xx as transient and retries.
                log.exception("API %s %s failed", request.method, request.path)
                return error(500, "internal_error", "the memory service failed; retry later")

        return wrapper

    return decorate


def _max_body() -> int:
    from django.conf import settings

    return int(settings.API_MAX_BODY_BYTES)


def _forbidden(key: ApiKey, user_id: str, agent_name: str, project_id: str | None) -> JsonResponse | None:
    """403 when the key is limited to other agents or other users (tenants), or the
    project belongs to another tenant than the user's (`facts.tenancy`)."""
    if not key.allows(agent_name):
        return error(403, "agent_not_allowed", f"this key may not act for the agent {agent_name!r}")
    if not key.allows_user(user_id):
        return error(403, "user_not_allowed", f"this key may not act for the user {user_id!r}")
    tenancy.check(user_id, project_id)  # ProjectNotAllowed: 403 (`api_endpoint`)
    return None


def _turn(request: HttpRequest, *, flush: bool) -> HttpResponse:
    body = read_json_body(request)
    turn = parse_turn(body)
    if denied := _forbidden(request.api_key, turn.user_id, turn.agent_name, turn.project_id):  # type: ignore[attr-defined]
        return denied

    receipt = api_service.accept_turn(turn, flush=flush)
    return JsonResponse(receipt, status=202)


@api_endpoint("POST")
def turns(request: HttpRequest) -> HttpResponse:
    """Record a finished turn; extraction runs later in the worker (debounced)."""
    return _turn(request, flush=False)


@api_endpoint("POST")
def flush(request: HttpRequest) -> HttpResponse:
    """Record messages about to be summarized away; processed without debounce."""
    return _turn(request, flush=True)


@api_endpoint("GET")
def context(request: HttpRequest) -> HttpResponse:
    scope_params = parse_scope(request.GET, require_agent=True)
    mode = parse_mode(request.GET)
    if denied := _forbidden(request.api_key, *scope_params.as_tuple()):  # type: ignore[attr-defined]
        return denied
    api_service.check_agent(scope_params.agent_name, request.api_key.allowed_agents or ())  # type: ignore[attr-defined]
    scope = api_service.Scope(scope_params.user_id, scope_params.agent_name, scope_params.project_id)
    return JsonResponse(api_service.serve_context(scope, mode=mode), json_dumps_params={"ensure_ascii": False})


@api_endpoint("GET")
def search(request: HttpRequest) -> HttpResponse:
    scope_params = parse_scope(request.GET, require_agent=True)
    query, limit = parse_search(request.GET)
    if denied := _forbidden(request.api_key, *scope_params.as_tuple()):  # type: ignore[attr-defined]
        return denied
    api_service.check_agent(scope_params.agent_name, request.api_key.allowed_agents or ())  # type: ignore[attr-defined]
    scope = api_service.Scope(scope_params.user_id, scope_params.agent_name, scope_params.project_id)
    results = api_service.serve_search(scope, query, limit=limit)
    return JsonResponse({"results": results}, json_dumps_params={"ensure_ascii": False})


def health(request: HttpRequest) -> HttpResponse:
    """Public, like a load balancer needs it: 200 when memory can be served, 503 (with
    the index's state and why) when it cannot. Says nothing about anyone's memory."""
    if request.method not in ("GET", "HEAD"):
        return error(405, "method_not_allowed", "use GET for this endpoint", Allow="GET")
    body = api_service.health()
    return JsonResponse(body, status=200 if body["status"] == "ok" else 503)


def openapi(request: HttpRequest) -> HttpResponse:
    """The OpenAPI 3.1 description (public, like any API documentation)."""
    from .openapi import spec

    if request.method not in ("GET", "HEAD"):
        return error(405, "method_not_allowed", "use GET for this endpoint", Allow="GET")
    return JsonResponse(spec(), json_dumps_params={"ensure_ascii": False, "indent": 2})


@csrf_exempt
def not_found(request: HttpRequest, rest: str = "") -> HttpResponse:
    return error(404, "not_found", f"no API endpoint at {request.path}")
