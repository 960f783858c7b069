"""Contract of the agents' HTTP API: success shapes and every error status."""

from __future__ import annotations

import io
import json
import multiprocessing
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client, RequestFactory

from facts.models import AuditEvent, FactUsage
from memoryadmin import api, api_auth
from memoryadmin.models import ApiKey, hash_key

# The API alone: the dashboard's URLs are not needed here.
pytestmark = [pytest.mark.django_db, pytest.mark.urls("memoryadmin.api_root_urls")]


@pytest.fixture(autouse=True)
def _inline_usage(settings: Any) -> None:
    settings.API_USAGE_FLUSH_SECONDS = 0


@pytest.fixture
def key_pair() -> tuple[ApiKey, str]:
    return ApiKey.issue("test agent")


@pytest.fixture
def agent(key_pair: tuple[ApiKey, str]) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {key_pair[1]}")


def turn_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "user_id": "alice",
        "agent_name": "coder",
        "thread_id": "t1",
        "messages": [
            {"id": "m1", "role": "user", "content": "我主要做 Python 后端开发，平时请用中文解释技术问题。"},
            {"id": "m2", "role": "assistant", "content": "好的。"},
        ],
    }
    body.update(overrides)
    return body


def post(client: Client, path: str, body: Any, **extra: Any) -> Any:
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post(path, data=data, content_type="application/json", **extra)


def error_of(response: Any) -> dict[str, str]:
    payload = response.json()
    assert set(payload) == {"error"}
    assert set(payload["error"]) == {"code", "message"}
    return payload["error"]


# --- success ---------------------------------------------------------------------


def test_it_accepts_a_turn_with_202_and_the_turn_ids(agent: Client) -> None:
    response = post(agent, "/api/v1/turns", turn_body())
    assert response.status_code == 202
    data = response.json()
    assert data["accepted"] == 2
    assert isinstance(data["turn_ids"], list) and data["turn_ids"]


def test_it_does_not_count_messages_it_has_already_seen(agent: Client) -> None:
    assert post(agent, "/api/v1/turns", turn_body()).json()["accepted"] == 2
    again = turn_body(messages=[*turn_body()["messages"], {"id": "m3", "role": "user", "content": "再补充一点。"}])
    assert post(agent, "/api/v1/turns", again).json()["accepted"] == 1


def test_it_flushes_with_the_same_body(agent: Client) -> None:
    response = post(agent, "/api/v1/flush", turn_body(thread_id="t-flush"))
    assert response.status_code == 202
    assert response.json()["accepted"] == 2


def test_it_serves_the_context_and_counts_the_injection(agent: Client, make_card: Any) -> None:
    from facts.storage.writer import save_card

    card = save_card(make_card(user_id="alice", agent_name="coder", content="用户偏好用中文解释技术问题。"), actor="t")
    response = agent.get("/api/v1/context", {"user_id": "alice", "agent_name": "coder"})
    assert response.status_code == 200
    data = response.json()
    assert set(data) >= {"text", "tokens", "included", "excluded"}
    assert card.id in data["included"]
    assert "中文" in data["text"]
    agent.get("/api/v1/context", {"user_id": "alice", "agent_name": "coder"})
    assert FactUsage.objects.get(fact_id=card.id).injected_count == 2


def test_it_renders_only_the_profile_in_tool_mode(agent: Client, make_card: Any) -> None:
    from facts.storage.writer import save_card

    card = save_card(make_card(user_id="alice", agent_name="coder"), actor="t")
    data = agent.get("/api/v1/context", {"user_id": "alice", "agent_name": "coder", "mode": "tool"}).json()
    assert card.id not in data["included"]
    assert not FactUsage.objects.filter(fact_id=card.id).exists()


def test_it_searches_and_counts_the_hits(agent: Client, make_card: Any) -> None:
    from facts.storage.writer import save_card

    card = save_card(make_card(user_id="alice", agent_name="coder", content="用户偏好用中文解释技术问题。"), actor="t")
    save_card(make_card(user_id="bob", agent_name="coder", content="用户偏好用中文解释技术问题。"), actor="t")
    response = agent.get("/api/v1/search", {"user_id": "alice", "agent_name": "coder", "q": "中文"})
    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["id"] for r in results] == [card.id]
    assert FactUsage.objects.get(fact_id=card.id).searched_count == 1
    assert FactUsage.objects.get(fact_id=card.id).injected_count == 0


def test_a_key_limited_to_some_agents_works_for_them() -> None:
    _, raw = ApiKey.issue("coder only", allowed_agents=["coder"])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert post(client, "/api/v1/turns", turn_body()).status_code == 202


def test_it_is_csrf_exempt_because_it_is_bearer_authenticated(key_pair: tuple[ApiKey, str]) -> None:
    client = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Bearer {key_pair[1]}")
    assert post(client, "/api/v1/turns", turn_body()).status_code == 202


# --- 401 / 403 -------------------------------------------------------------------


def test_it_refuses_a_request_without_a_key() -> None:
    response = post(Client(), "/api/v1/turns", turn_body())
    assert response.status_code == 401
    assert error_of(response)["code"] == "unauthenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_it_refuses_an_unknown_key() -> None:
    response = Client(HTTP_AUTHORIZATION="Bearer mem_nope").get("/api/v1/context", {"user_id": "alice"})
    assert response.status_code == 401
    assert error_of(response)["code"] == "invalid_key"


def test_it_refuses_a_revoked_key(key_pair: tuple[ApiKey, str], agent: Client) -> None:
    key_pair[0].revoke()
    response = agent.get("/api/v1/context", {"user_id": "alice", "agent_name": "__default__"})
    assert response.status_code == 401
    assert error_of(response)["code"] == "key_revoked"


def test_a_logged_in_dashboard_user_without_a_key_is_refused(admin_client_: Client) -> None:
    assert admin_client_.get("/api/v1/context", {"user_id": "alice"}).status_code == 401


@pytest.mark.parametrize(
    ("method", "path", "params"),
    [
        ("post", "/api/v1/turns", None),
        ("post", "/api/v1/flush", None),
        ("get", "/api/v1/context", {"user_id": "alice", "agent_name": "writer"}),
        ("get", "/api/v1/search", {"user_id": "alice", "agent_name": "writer", "q": "x"}),
    ],
)
def test_it_refuses_an_agent_the_key_is_not_allowed_for(method: str, path: str, params: Any) -> None:
    _, raw = ApiKey.issue("coder only", allowed_agents=["coder"])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    response = post(client, path, turn_body(agent_name="writer")) if method == "post" else client.get(path, params)
    assert response.status_code == 403
    assert error_of(response)["code"] == "agent_not_allowed"


def test_a_key_limited_to_agents_does_not_cover_the_default_agent() -> None:
    _, raw = ApiKey.issue("coder only", allowed_agents=["coder"])
    response = Client(HTTP_AUTHORIZATION=f"Bearer {raw}").get(
        "/api/v1/context", {"user_id": "alice", "agent_name": "__default__"}
    )
    assert response.status_code == 403


# --- 405 / 404 -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("get", "/api/v1/turns", "POST"),
        ("put", "/api/v1/flush", "POST"),
        ("post", "/api/v1/context", "GET"),
        ("delete", "/api/v1/search", "GET"),
        ("post", "/api/v1/openapi.json", "GET"),
    ],
)
def test_it_answers_a_wrong_method_with_405(agent: Client, method: str, path: str, allow: str) -> None:
    response = getattr(agent, method)(path)
    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"
    assert response["Allow"] == allow


def test_an_unknown_api_path_answers_json_404(agent: Client) -> None:
    response = agent.get("/api/v1/nothing/here")
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


# --- 400 ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{not json", "body"),
        (b"[1, 2]", "body"),
        (b'{"user_id": "\xff\xfe"}', "UTF-8"),
        (b'{"user_id": "\\ud800", "thread_id": "t", "messages": []}', "surrogate"),
        (("[" * 5000 + "]" * 5000).encode(), "nested"),
        (b'{"a": ' + b"[" * 34 + b"1" + b"]" * 34 + b"}", "nested"),
    ],
)
def test_it_rejects_malformed_bodies_with_400(agent: Client, body: bytes, field: str) -> None:
    response = post(agent, "/api/v1/turns", body)
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "malformed"
    assert field in error["message"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"user_id": None}, "user_id"),
        ({"user_id": 42}, "user_id"),
        ({"user_id": "../../etc/passwd"}, "user_id"),
        ({"user_id": "x" * 201}, "user_id"),
        ({"user_id": "alice\x00"}, "user_id"),
        ({"user_id": ".."}, "user_id"),
        ({"thread_id": ""}, "thread_id"),
        ({"thread_id": "a/b"}, "thread_id"),
        ({"project_id": "p\\q"}, "project_id"),
        ({"agent_name": "Not An Agent!"}, "agent_name"),
        ({"messages": None}, "messages"),
        ({"messages": "hello"}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": ["hello"]}, "messages[0]"),
        ({"messages": [{"id": "m1", "role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"id": 7, "role": "user", "content": "x"}]}, "messages[0].id"),
        ({"messages": [{"id": "", "role": "user", "content": "x"}]}, "messages[0].id"),
        ({"messages": [{"id": "m1", "role": "user", "content": 5}]}, "messages[0].content"),
        (
            {"messages": [{"id": "m1", "role": "user", "content": "a"}, {"id": "m1", "role": "user", "content": "b"}]},
            "messages[1].id",
        ),
    ],
)
def test_it_rejects_bad_fields_with_400_naming_the_field(agent: Client, overrides: dict, field: str) -> None:
    response = post(agent, "/api/v1/turns", turn_body(**overrides))
    assert response.status_code == 400
    assert error_of(response)["message"].startswith(field + ":")


def test_a_message_without_an_id_gets_a_stable_one(agent: Client) -> None:
    body = turn_body(thread_id="no-ids", messages=[{"role": "user", "content": "我主要做 Python 后端开发。"}])
    assert post(agent, "/api/v1/turns", body).json()["accepted"] == 1
    assert post(agent, "/api/v1/turns", body).json()["accepted"] == 0


def test_it_rejects_too_many_messages(agent: Client, settings: Any) -> None:
    settings.API_MAX_MESSAGES = 3
    messages = [{"id": f"m{i}", "role": "user", "content": "x"} for i in range(4)]
    response = post(agent, "/api/v1/turns", turn_body(messages=messages))
    assert response.status_code == 400
    assert error_of(response)["message"].startswith("messages:")


def test_it_rejects_a_message_that_is_too_long(agent: Client, settings: Any) -> None:
    settings.API_MAX_MESSAGE_CHARS = 10
    response = post(agent, "/api/v1/turns", turn_body(messages=[{"id": "m", "role": "user", "content": "x" * 11}]))
    assert response.status_code == 400
    assert error_of(response)["message"].startswith("messages[0].content:")


def test_it_rejects_a_body_that_is_not_json_by_content_type(agent: Client) -> None:
    response = agent.post("/api/v1/turns", data="user_id=alice", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("/api/v1/context", {}, "user_id"),
        ("/api/v1/context", {"user_id": "a/b"}, "user_id"),
        ("/api/v1/context", {"user_id": "alice", "agent_name": "coder", "mode": "everything"}, "mode"),
        ("/api/v1/context", {"user_id": "alice", "agent_name": "UPPER CASE"}, "agent_name"),
        ("/api/v1/context", {"user_id": "alice", "agent_name": "coder", "project_id": "p" * 300}, "project_id"),
        ("/api/v1/context", {"user_id": "alice"}, "agent_name"),
        ("/api/v1/search", {"user_id": "alice", "agent_name": "coder"}, "q"),
        ("/api/v1/search", {"user_id": "alice", "agent_name": "coder", "q": "   "}, "q"),
        ("/api/v1/search", {"user_id": "alice", "agent_name": "coder", "q": "x" * 2001}, "q"),
        ("/api/v1/search", {"user_id": "alice", "agent_name": "coder", "q": "中文", "limit": "lots"}, "limit"),
        ("/api/v1/search", {"user_id": "alice", "q": "中文"}, "agent_name"),
        ("/api/v1/search", {"user_id": ["alice", "bob"], "q": "中文"}, "user_id"),
    ],
)
def test_it_rejects_bad_query_parameters_with_400(agent: Client, path: str, params: dict, field: str) -> None:
    response = agent.get(path, params)
    assert response.status_code == 400
    assert error_of(response)["message"].startswith(field + ":")


def test_it_clamps_the_search_limit_like_the_tool(agent: Client) -> None:
    response = agent.get(
        "/api/v1/search", {"user_id": "alice", "agent_name": "__default__", "q": "中文", "limit": "500"}
    )
    assert response.status_code == 200


# --- 413 ---------------------------------------------------------------------------


def test_it_answers_413_for_a_body_over_the_limit(agent: Client, settings: Any) -> None:
    settings.API_MAX_BODY_BYTES = 1000
    body = turn_body(messages=[{"id": "m1", "role": "user", "content": "x" * 2000}])
    response = post(agent, "/api/v1/turns", body)
    assert response.status_code == 413
    assert error_of(response)["code"] == "too_large"


def test_it_answers_413_from_the_declared_length_without_reading(key_pair: tuple[ApiKey, str], settings: Any) -> None:
    settings.API_MAX_BODY_BYTES = 1000
    request = RequestFactory().post(
        "/api/v1/turns", data=b"{}", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key_pair[1]}"
    )
    request.META["CONTENT_LENGTH"] = str(10**9)
    response = api.turns(request)
    assert response.status_code == 413


def test_the_default_body_limit_is_one_mebibyte(agent: Client) -> None:
    body = json.dumps(turn_body(messages=[{"id": "m1", "role": "user", "content": "x" * (1024 * 1024)}]))
    assert len(body) > 1024 * 1024
    assert post(agent, "/api/v1/turns", body).status_code == 413


# --- 429 ---------------------------------------------------------------------------


def test_it_answers_429_when_the_key_exceeds_its_rate_limit(key_pair: tuple[ApiKey, str], agent: Client) -> None:
    key, _ = key_pair
    key.rate_limit_per_minute = 2
    key.save()
    statuses = [
        agent.get("/api/v1/context", {"user_id": "alice", "agent_name": "__default__"}).status_code for _ in range(3)
    ]
    assert statuses[:2] == [200, 200]
    assert statuses[2] == 429
    response = agent.get("/api/v1/context", {"user_id": "alice", "agent_name": "__default__"})
    assert error_of(response)["code"] == "rate_limited"
    assert 1 <= int(response["Retry-After"]) <= 60


def test_the_rate_limit_setting_applies_to_keys_without_their_own(agent: Client, settings: Any) -> None:
    settings.API_RATE_LIMIT_PER_MINUTE = 1
    assert agent.get("/api/v1/context", {"user_id": "alice", "agent_name": "__default__"}).status_code == 200
    assert agent.get("/api/v1/context", {"user_id": "alice", "agent_name": "__default__"}).status_code == 429


def test_the_rate_limit_is_per_key(agent: Client, settings: Any) -> None:
    settings.API_RATE_LIMIT_PER_MINUTE = 1
    _, other = ApiKey.issue("other")
    assert agent.get("/api/v1/context", {"user_id": "alice", "agent_name": "__default__"}).status_code == 200
    assert (
        Client(HTTP_AUTHORIZATION=f"Bearer {other}")
        .get("/api/v1/context", {"user_id": "a", "agent_name": "__default__"})
        .status_code
        == 200
    )


def test_a_new_minute_starts_a_new_window(key_pair: tuple[ApiKey, str]) -> None:
    key, _ = key_pair
    key.rate_limit_per_minute = 1
    assert api_auth.hit(key, now=60_000.0).allowed
    assert not api_auth.hit(key, now=60_030.0).allowed
    assert api_auth.hit(key, now=60_061.0).allowed


def _hit_in_child(key: ApiKey, times: int) -> None:
    api_auth._local.connections = {}  # a forked child must not share the parent's SQLite handle
    for _ in range(times):
        api_auth.hit(key, now=120_000.0)


def test_the_rate_limit_is_shared_between_processes(key_pair: tuple[ApiKey, str]) -> None:
    key, _ = key_pair
    key.rate_limit_per_minute = 5
    child = multiprocessing.get_context("fork").Process(target=_hit_in_child, args=(key, 4))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert api_auth.hit(key, now=120_001.0).allowed
    decision = api_auth.hit(key, now=120_002.0)
    assert not decision.allowed
    assert decision.count == 6


def test_it_records_when_a_key_was_last_used(key_pair: tuple[ApiKey, str], agent: Client) -> None:
    agent.get("/api/v1/context", {"user_id": "alice", "agent_name": "__default__"})
    key_pair[0].refresh_from_db()
    assert key_pair[0].last_used_at is not None


# --- keys ----------------------------------------------------------------------------


def test_create_api_key_prints_the_key_once_and_stores_its_hash() -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command("create_api_key", "ci agent", "--agents", "coder,Writer", stdout=out, stderr=err)
    raw = out.getvalue().strip()
    assert raw.startswith("mem_")
    key = ApiKey.objects.get(name="ci agent")
    assert key.key_hash == hash_key(raw)
    assert raw not in json.dumps(list(ApiKey.objects.values()), default=str)
    assert key.allowed_agents == ["coder", "writer"]
    assert AuditEvent.objects.filter(action="api_key", target=key.prefix).exists()
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/v1/context", {"user_id": "alice", "agent_name": "coder"}).status_code == 200
    assert client.get("/api/v1/context", {"user_id": "alice", "agent_name": "other"}).status_code == 403


def test_create_api_key_can_set_a_rate_limit() -> None:
    call_command("create_api_key", "slow", "--rate-limit", "10", stdout=io.StringIO(), stderr=io.StringIO())
    assert ApiKey.objects.get(name="slow").rate_limit_per_minute == 10


def test_an_unexpected_failure_answers_json_500(agent: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("database is locked")

    monkeypatch.setattr("memoryadmin.api_service.accept_turn", broken)
    response = post(agent, "/api/v1/turns", turn_body())
    assert response.status_code == 500
    assert error_of(response)["code"] == "internal_error"


@pytest.mark.urls("memoryadmin.urls")
def test_the_project_urls_mount_the_api_under_api_v1() -> None:
    from django.urls import resolve

    assert resolve("/api/v1/turns").func.__name__ == "turns"
    assert resolve("/api/v1/context").func.__name__ == "context"
    assert resolve("/api/v1/openapi.json").func.__name__ == "openapi"
