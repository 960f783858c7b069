"""Fuzzing the agents' API body parser: any bytes, any JSON, any mangled turn gives a
parsed turn or a BadRequest/TooLarge (a 4xx), never another exception (a 500)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from django.test import Client, RequestFactory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryadmin.api_schemas import BadRequest, TooLarge, parse_turn, read_json_body
from memoryadmin.models import ApiKey

from .helpers_reliability.fuzz import examples

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=20,
)
FIELDS = ["user_id", "agent_name", "thread_id", "project_id", "messages"]
MESSAGE_FIELDS = ["id", "role", "content", "additional_kwargs", "tool_calls", "type", "data"]


def _valid() -> dict[str, Any]:
    return {
        "user_id": "alice",
        "agent_name": "coder",
        "thread_id": "t1",
        "messages": [{"id": "m1", "role": "user", "content": "I like Python."}],
    }


def _parse_bytes(raw: bytes) -> None:
    request = RequestFactory().post("/api/v1/turns", raw, content_type="application/json")
    with contextlib.suppress(BadRequest, TooLarge):
        parse_turn(read_json_body(request))


@settings(max_examples=examples(400))
@given(raw=st.binary(max_size=300))
def test_any_bytes_are_a_turn_or_a_bad_request(raw: bytes) -> None:
    _parse_bytes(raw)


@settings(max_examples=examples(400))
@given(value=json_values)
def test_any_json_is_a_turn_or_a_bad_request(value: Any) -> None:
    _parse_bytes(json.dumps(value).encode())


@settings(max_examples=examples(400))
@given(field=st.sampled_from(FIELDS), value=json_values, message_field=st.sampled_from(MESSAGE_FIELDS))
def test_a_valid_turn_with_one_field_mangled_is_a_turn_or_a_bad_request(
    field: str, value: Any, message_field: str
) -> None:
    body = _valid()
    body[field] = value
    _parse_bytes(json.dumps(body).encode())
    body = _valid()
    body["messages"][0][message_field] = value
    _parse_bytes(json.dumps(body).encode())


@pytest.mark.django_db
@settings(
    max_examples=examples(60), deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)  # fmt: skip
@given(field=st.sampled_from(FIELDS), value=json_values)
def test_the_endpoint_answers_4xx_or_202_never_500(field: str, value: Any) -> None:
    _, raw = ApiKey.issue("fuzz")  # a key per example: the rate limit never interferes
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    body = _valid()
    body[field] = value
    response = client.post("/api/v1/turns", json.dumps(body), content_type="application/json")
    assert response.status_code in (202, 400, 403, 413), response.content[:300]
    assert "error" in response.json() or response.status_code == 202
