"""The OpenAPI description matches the implementation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from facts.models import FactCard
from memoryadmin import api_urls
from memoryadmin.models import ApiKey
from memoryadmin.openapi import BACKFILL_EXAMPLE, PREFIX, TURN_EXAMPLE, spec
from tests.openai_stub import OpenAIStub

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


@pytest.mark.parametrize("example", [TURN_EXAMPLE, BACKFILL_EXAMPLE])
def test_the_request_examples_validate_against_their_schema(example: dict[str, Any]) -> None:
    schema_validator("TurnRequest").validate(example)


def test_the_schema_describes_when_a_turn_and_a_message_were_said() -> None:
    schemas = spec()["components"]["schemas"]
    assert schemas["SaidAt"]["format"] == "date-time"
    assert {"$ref": "#/components/schemas/SaidAt"} in schemas["TurnRequest"]["properties"]["created_at"]["oneOf"]
    assert schemas["Message"]["properties"]["created_at"] == {"$ref": "#/components/schemas/SaidAt"}


def test_every_inline_example_validates_against_its_schema() -> None:
    checked = 0
    for operations in spec()["paths"].values():
        for operation in operations.values():
            bodies = [operation.get("requestBody", {}).get("content", {}).get("application/json")]
            bodies += [r.get("content", {}).get("application/json") for r in operation["responses"].values()]
            for media in bodies:
                if not media:
                    continue
                examples = [media["example"]] if "example" in media else []
                examples += [named["value"] for named in media.get("examples", {}).values()]
                for example in examples:
                    name = media["schema"]["$ref"].rsplit("/", 1)[-1]
                    schema_validator(name).validate(example)
                    checked += 1
    assert checked >= 10


@pytest.mark.parametrize("path", ["/turns", "/flush"])
@pytest.mark.parametrize("example", [TURN_EXAMPLE, BACKFILL_EXAMPLE])
def test_the_request_examples_are_accepted_by_the_endpoint(agent: Client, path: str, example: dict[str, Any]) -> None:
    response = agent.post(PREFIX + path, data=json.dumps(example), content_type="application/json")
    assert response.status_code == 202
    schema_validator("TurnReceipt").validate(response.json())


def test_the_backfill_example_dates_its_fact_when_it_was_said(agent: Client, openai_stub: OpenAIStub) -> None:
    openai_stub.reply_tool_call(
        {
            "facts": [
                {
                    "key": "response_language", "content": "User prefers answers in English.",
                    "category": "preference", "scope": "user", "durability": "durable",
                    "authority": "descriptive", "confidence": 0.9, "evidence_message_id": "m1",
                    "evidence_text": "please answer in English",
                }
            ]
        }
    )  # fmt: skip
    response = agent.post(PREFIX + "/flush", data=json.dumps(BACKFILL_EXAMPLE), content_type="application/json")
    assert response.status_code == 202
    card = FactCard.objects.get(key="response_language")
    assert card.created_at.isoformat() == "2023-03-14T08:26:53+00:00"


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
