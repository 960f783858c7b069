"""Bearer-key authentication and the per-key rate limit of the agents' API.

The rate limit must hold across gunicorn workers and, on PostgreSQL, across machines,
so the counters live outside process memory (`memoryadmin.ratelimit`: a table of the
database on PostgreSQL, a small SQLite file on one machine). One UPSERT per request.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import connection
from django.http import HttpRequest
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from . import ratelimit
from .models import ApiKey, hash_key
from .ratelimit import _local  # noqa: F401 - tests reset it after a fork

WINDOW_SECONDS = 60

log = logging.getLogger(__name__)


class AuthError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def authenticate(request: HttpRequest) -> ApiKey:
    """The active key named by ``Authorization: Bearer <key>``, or AuthError.

    Never looks at the session: a logged-in dashboard user without a key is refused.
    """
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, raw = header.partition(" ")
    raw = raw.strip()
    if scheme.lower() != "bearer" or not raw:
        raise AuthError("unauthenticated", "send an API key as 'Authorization: Bearer <key>'")
    if len(raw) > 200:
        raise AuthError("invalid_key", "unknown API key")
    key = _lookup(hash_key(raw))
    if key is None:
        raise AuthError("invalid_key", "unknown API key")
    if not key.active:
        raise AuthError("key_revoked", "this API key has been revoked")
    return key


_KEY_FIELDS = (
    "id",
    "name",
    "prefix",
    "key_hash",
    "allowed_agents",
    "allowed_users",
    "rate_limit_per_minute",
    "revoked_at",
)


def _lookup(key_hash: str) -> ApiKey | None:
    """The key with this hash, read with one plain SELECT (it runs on every request;
    the ORM's query building costs more than the query)."""
    table = connection.ops.quote_name(ApiKey._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(name) for name in _KEY_FIELDS)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {table} WHERE key_hash = %s", [key_hash])
        row = cursor.fetchone()
    if row is None:
        return None
    values = dict(zip(_KEY_FIELDS, row, strict=True))
    for name in ("allowed_agents", "allowed_users"):
        if isinstance(values[name], str):
            values[name] = json.loads(values[name])
    revoked = values["revoked_at"]
    if isinstance(revoked, str):
        values["revoked_at"] = parse_datetime(revoked)
    return ApiKey(**values)


# --- rate limit ------------------------------------------------------------------


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    limit: int
    count: int
    retry_after: int
    first_in_window: bool


def limit_for(key: ApiKey) -> int:
    if key.rate_limit_per_minute is not None:
        return key.rate_limit_per_minute
    return int(settings.API_RATE_LIMIT_PER_MINUTE)


def hit(key: ApiKey, *, now: float | None = None) -> RateDecision:
    """Count one request of `key` in the current minute (fixed window)."""
    limit = limit_for(key)
    now = time.time() if now is None else now
    window = int(now // WINDOW_SECONDS)
    retry_after = max(1, int((window + 1) * WINDOW_SECONDS - now))
    count = ratelimit.count("hits", key.key_hash[:32], window)
    first = count == 1
    allowed = limit <= 0 or count <= limit
    return RateDecision(allowed, limit, count, retry_after, first)


def touch(key: ApiKey) -> None:
    """Record that the key was used; called once per key and minute, not per request."""
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())


# --- failed keys per client address ----------------------------------------------------
#
# Only failures are throttled: once an address has sent API_AUTH_FAILURE_LIMIT unknown,
# revoked or missing keys within the window, its further failures answer 429 with
# Retry-After instead of 401, while a valid key from the same address still passes.
# Keys are 256 random bits, so letting a correct key through gives a guesser nothing;
# refusing it would let anyone behind the same NAT or reverse proxy (where every client
# has the proxy's address) lock every agent out with a few bad requests.


def client_address(request: HttpRequest) -> str:
    return str(request.META.get("REMOTE_ADDR") or "unknown")[:64]


def record_failure(addr: str, *, now: float | None = None) -> RateDecision:
    """Count one failed authentication from `addr`; `allowed` is False past the limit."""
    limit = int(settings.API_AUTH_FAILURE_LIMIT)
    length = max(1, int(settings.API_AUTH_FAILURE_WINDOW_SECONDS))
    now = time.time() if now is None else now
    window = int(now // length)
    retry_after = max(1, int((window + 1) * length - now))
    count = ratelimit.count("failures", addr, window)
    first = count == 1
    allowed = limit <= 0 or count <= limit
    if count == limit + 1:
        log.warning("API: %d failed keys from %s within %d s; throttled for %d s", limit, addr, length, retry_after)
    return RateDecision(allowed, limit, count, retry_after, first)


class Refused(Exception):
    """A request the key check turns away: the HTTP status, an error code, the message
    and the headers to send (each door formats the body its own way)."""

    def __init__(self, status: int, code: str, message: str, **headers: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


def admit(request: HttpRequest) -> ApiKey:
    """The one key check of every agents' door (JSON API, MCP): bearer key, the failed-key
    throttle of the client's address, then the key's rate limit. Returns the key or
    raises `Refused`."""
    try:
        key = authenticate(request)
    except AuthError as exc:
        failures = record_failure(client_address(request))
        if not failures.allowed:
            raise Refused(
                429,
                "too_many_failures",
                f"more than {failures.limit} failed API keys from this address; retry later",
                Retry_After=str(failures.retry_after),
            ) from None
        raise Refused(401, exc.code, exc.message, WWW_Authenticate='Bearer realm="memory"') from None
    decision = hit(key)
    if decision.first_in_window:
        touch(key)
    if not decision.allowed:
        raise Refused(
            429,
            "rate_limited",
            f"this key may make {decision.limit} requests a minute",
            Retry_After=str(decision.retry_after),
        )
    return key
