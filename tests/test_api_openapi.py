"""The OpenAPI description matches the implementation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from memoryadmin import api_urls
from memoryadmin.models import ApiKey
from memoryadmin.openapi import PREFIX, TURN_EXAMPLE, spec

pytestmark = [pytest.mark.django_db, pytest.mark.urls("memoryadmin.api_root_urls")]

METHODS = ("get", "post", "put", "patch", "delete")


@pytest.fixture(autouse=True)
def _inline_usage(settings: Any) -> None:
    settings.API_USAGE_FLUSH_SECONDS = 0


@pytest.fixture
def agent() -> Client:
    _, raw = ApiKey.issue("openapi")
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


def schema_validator(name: str) -> Draft202012Validator:
    document = spec()
    return Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": document["components"]})


def test_it_is_a_valid_openapi_3_1_document() -> None:
    document = spec()
    assert document["openapi"].startswith("3.1")
    validate(document)


def test_it_is_served_without_a_key() -> None:
    response = Client().get("/api/v1/openapi.json")
    assert response.status_code == 200
    assert response.json() == json.loads(json.dumps(spec()))


def test_every_route_is_described_and_every_described_route_exists() -> None:
    routes = {
        "/" + str(pattern.pattern)
        for pattern in api_urls.urlpatterns
        if isinstance(pattern, URLPattern) and pattern.name != "api_not_found"
    }
    assert routes == set(spec()["paths"])


@pytest.mark.parametrize("path", list(spec()["paths"]))
def test_described_methods_are_served_and_the_others_are_405(agent: Client, path: str) -> None:
    described = set(spec()["paths"][path])
    for method in METHODS:
        response = getattr(agent, method)(PREFIX + path)
        if method in described:
            assert response.status_code != 405, (method, path)
            assert response.status_code != 404, (method, path)
        else:
            assert response.status_code == 405, (method, path)


@pytest.mark.parametrize("name", ["TurnRequest"])
def test_the_request_example_validates_against_its_schema(name: str) -> None:
    schema_validator(name).validate(TURN_EXAMPLE)


def test_every_inline_example_validates_against_its_schema() -> None:
    checked = 0
    for operations in spec()["paths"].values():
        for operation in operations.values():
            bodies = [operation.get("requestBody", {}).get("content", {}).get("application/json")]
            bodies += [r.get("content", {}).get("application/json") for r in operation["responses"].values()]
            for media in bodies:
                if media and "example" in media:
                    name = media["schema"]["$ref"].rsplit("/", 1)[-1]
                    schema_validator(name).validate(media["example"])
                    checked += 1
    assert checked >= 10


@pytest.mark.parametrize("path", ["/turns", "/flush"])
def test_the_request_example_is_accepted_by_the_endpoint(agent: Client, path: str) -> None:
    response = agent.post(PREFIX + path, data=json.dumps(TURN_EXAMPLE), content_type="application/json")
    assert response.status_code == 202
    schema_validator("TurnReceipt").validate(response.json())


def test_real_answers_validate_against_the_described_schemas(agent: Client) -> None:
    agent.post(PREFIX + "/turns", data=json.dumps(TURN_EXAMPLE), content_type="application/json")  # coder is known
    context = agent.get(PREFIX + "/context", {"user_id": "alice", "agent_name": "coder"})
    schema_validator("Context").validate(context.json())
    search = agent.get(PREFIX + "/search", {"user_id": "alice", "agent_name": "coder", "q": "中文"})
    schema_validator("SearchResults").validate(search.json())
    error = agent.get(PREFIX + "/context")
    assert error.status_code == 400
    schema_validator("Error").validate(error.json())
    unknown = agent.get(PREFIX + "/context", {"user_id": "alice", "agent_name": "codr"})
    assert unknown.status_code == 404
    schema_validator("Error").validate(unknown.json())
    health = agent.get(PREFIX + "/health")
    assert health.status_code == 200
    schema_validator("Health").validate(health.json())


def test_the_described_error_statuses_are_the_ones_the_api_uses() -> None:
    turns = spec()["paths"]["/turns"]["post"]["responses"]
    assert {"202", "400", "401", "403", "405", "413", "429"} <= set(turns)
