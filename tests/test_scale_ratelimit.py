"""The API's rate limit counts across machines when the database is PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from memoryadmin.models import ApiKey, RateCounter

pytestmark = pytest.mark.django_db


def _agent(raw: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


@pytest.fixture(autouse=True)
def _inline_usage(settings: Any) -> None:
    settings.API_USAGE_FLUSH_SECONDS = 0


def test_it_refuses_the_third_request_even_when_each_came_through_another_machine(
    settings: Any, tmp_path: Path
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("machines share counters only through PostgreSQL")
    key, raw = ApiKey.issue("scale")
    key.rate_limit_per_minute = 2
    key.allowed_agents = ["coder"]  # known before its first turn
    key.save()
    statuses = []
    for machine in ("a", "b", "c"):
        # Each machine has its own local directories; only the database is shared.
        settings.MEMORY_ROOT = tmp_path / machine
        statuses.append(_agent(raw).get("/api/v1/context", {"user_id": "alice", "agent_name": "coder"}).status_code)
    assert statuses == [200, 200, 429]
    assert RateCounter.objects.get(kind="hits").n == 3


def test_it_throttles_failed_keys_from_one_address_across_machines(settings: Any, tmp_path: Path) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("machines share counters only through PostgreSQL")
    settings.API_AUTH_FAILURE_LIMIT = 2
    statuses = []
    for machine in ("a", "b", "c"):
        settings.MEMORY_ROOT = tmp_path / machine
        statuses.append(_agent("wrong-key").get("/api/v1/context", {"user_id": "alice"}).status_code)
    assert statuses == [401, 401, 429]
