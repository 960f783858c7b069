"""Hardening of the agents' API after a black-box attack (issue 16): strict JSON, chunked
bodies, control characters, short validation errors, throttled wrong keys and keys
limited to some users (tenants)."""

from __future__ import annotations

import io
import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from facts.intake.queue import record_turn
from facts.intake.turns import TurnRejected
from facts.models import AuditEvent, Turn
from facts.storage.writer import save_card
from memoryadmin import api_auth
from memoryadmin.api_schemas import CHUNK_BYTES
from memoryadmin.client import LocalMemory
from memoryadmin.langchain_memory import to_wire
from memoryadmin.memory_protocol import MemoryContext, MemoryRejected
from memoryadmin.models import ApiKey
from retrieval.render import render_context
from tests.factories import fact_candidate
from tests.helpers_reliability.fuzz import examples
from tests.openai_stub import OpenAIStub

pytestmark = pytest.mark.django_db

TURNS = "/api/v1/turns"


@pytest.fixture
def key_pair() -> tuple[ApiKey, str]:
    return ApiKey.issue("test agent")


@pytest.fixture
def agent(key_pair: tuple[ApiKey, str]) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {key_pair[1]}")


def turn_body(*messages: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "user_id": "alice",
        "agent_name": "coder",
        "thread_id": "t1",
        "messages": list(messages) or [{"id": "u1", "role": "user", "content": "I mostly write Go."}],
    }
    body.update(overrides)
    return body


def post_raw(client: Client, body: str | bytes, path: str = TURNS) -> Any:
    return client.post(path, data=body, content_type="application/json")


def error_of(response: Any) -> dict[str, str]:
    payload = response.json()
    assert set(payload) == {"error"}, payload
    return payload["error"]


# --- strict JSON: NaN and Infinity ---------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "where"),
    [
        ('{"id": "u1", "role": "user", "content": "hi", "additional_kwargs": {"x": NaN}}', "additional_kwargs.x"),
        (
            '{"id": "a1", "role": "assistant", "content": "", "tool_calls": '
            '[{"id": "c1", "name": "f", "args": {"v": Infinity}}]}',
            "tool_calls[0].args.v",
        ),
        ('{"id": "u1", "role": "user", "content": [{"type": "text", "text": "hi", "s": -Infinity}]}', "content[0].s"),
        ('{"id": "u1", "role": "user", "content": "hi", "additional_kwargs": {"deep": [1, 1e999]}}', "deep[1]"),
    ],
)
def test_it_refuses_nan_and_infinity_anywhere_with_a_400_naming_the_place(
    agent: Client, message: str, where: str
) -> None:
    body = '{"user_id": "alice", "agent_name": "coder", "thread_id": "t1", "messages": [' + message + "]}"
    response = post_raw(agent, body)
    assert response.status_code == 400, response.content
    err = error_of(response)
    assert err["message"].startswith("messages[0].")
    assert where in err["message"]
    assert "is not a JSON number; send a finite number or null" in err["message"]
    assert Turn.objects.count() == 0


def test_a_nan_in_process_is_refused_as_bad_input_not_as_an_outage() -> None:
    message = {"id": "u1", "role": "user", "content": "hi", "additional_kwargs": {"score": float("nan")}}
    with pytest.raises(TurnRejected, match=r"messages\[0\]\.additional_kwargs\.score"):
        record_turn(user_id="alice", agent_name="coder", thread_id="t1", messages=[message])
    # The middleware's in-process memory: rejected (dropped), never retried from the outbox as an outage.
    with pytest.raises(MemoryRejected):
        LocalMemory().record_turn(MemoryContext(user_id="alice", agent_name="coder", thread_id="t1"), [message])
    # The HTTP body's other checks apply in process too: 100 levels deep is refused, not an outage.
    deep: Any = 1
    for _ in range(100):
        deep = {"d": deep}
    nested = {"id": "u2", "role": "user", "content": "hi", "additional_kwargs": deep}
    with pytest.raises(MemoryRejected, match="nested deeper"):
        LocalMemory().record_turn(MemoryContext(user_id="alice", agent_name="coder", thread_id="t1"), [nested])
    assert Turn.objects.count() == 0


def test_the_middleware_sends_null_for_nan_so_the_turn_is_not_lost() -> None:
    message = AIMessage(
        content="ok",
        id="a1",
        additional_kwargs={"logprob": float("-inf")},
        tool_calls=[{"id": "c1", "name": "f", "args": {"v": float("nan")}}],
    )
    wire = to_wire(message)
    assert wire["additional_kwargs"] == {"logprob": None}
    assert wire["tool_calls"][0]["args"] == {"v": None}
    json.dumps(wire, allow_nan=False)  # what httpx sends: strict JSON
    user = to_wire(HumanMessage(content="I mostly write Go.", id="u1", additional_kwargs={"s": float("inf")}))
    ctx = MemoryContext(user_id="alice", agent_name="coder", thread_id="t1")
    assert LocalMemory().record_turn(ctx, [user, wire])["accepted"] == 2


# --- chunked bodies --------------------------------------------------------------------------


class Endless(io.RawIOBase):
    """A request body that never ends; counts what the server read of it."""

    def __init__(self) -> None:
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        assert size > 0, "the server tried to read an endless body to its end"
        self.read_bytes += size
        return b"x" * size


def chunked_environ(stream: Any, *, terminated: bool = True) -> dict[str, Any]:
    # What gunicorn hands Django for a chunked request: no CONTENT_LENGTH, the chunk
    # framing already removed from wsgi.input, and wsgi.input_terminated set.
    return {
        "wsgi.input": stream,
        "wsgi.input_terminated": terminated,
        "HTTP_TRANSFER_ENCODING": "chunked",
        "CONTENT_TYPE": "application/json",
    }


def test_a_chunked_body_without_content_length_is_read(agent: Client) -> None:
    raw = json.dumps(turn_body()).encode()
    response = agent.generic("POST", TURNS, **chunked_environ(io.BytesIO(raw)))
    assert response.status_code == 202, response.content
    assert response.json()["accepted"] == 1


def test_a_chunked_body_over_the_limit_is_413_without_reading_the_rest(agent: Client, settings: Any) -> None:
    settings.API_MAX_BODY_BYTES = 200_000
    stream = Endless()
    response = agent.generic("POST", TURNS, **chunked_environ(stream))
    assert response.status_code == 413
    assert error_of(response)["code"] == "too_large"
    assert stream.read_bytes <= 200_000 + CHUNK_BYTES


def test_a_chunked_body_the_server_cannot_end_is_refused_not_waited_for(agent: Client) -> None:
    response = agent.generic("POST", TURNS, **chunked_environ(Endless(), terminated=False))
    assert response.status_code == 400
    assert error_of(response)["message"].startswith("Content-Length:")


# --- control characters ------------------------------------------------------------------------


def test_control_characters_are_removed_from_message_text_before_anything_stores_it(agent: Client) -> None:
    messages: list[dict[str, Any]] = [
        {
            "id": "u1",
            "role": "user",
            "content": "I prefer\u0000 tea\u0007 over\u009b coffee\tand\r\nmilk",
            "additional_kwargs": {"note\u0000": "a\u0000b", "n": 1},
        },
        {"id": "u2", "role": "user", "content": [{"type": "text", "text": "block\u0000 text"}]},
    ]
    response = post_raw(agent, json.dumps(turn_body(*messages)))
    assert response.status_code == 202, response.content
    stored = Turn.objects.get().messages
    assert "\\u0000" not in json.dumps(stored)
    assert stored[0]["data"]["content"] == "I prefer tea over coffee\tand\r\nmilk"  # tab, CR, LF kept
    assert stored[0]["data"]["additional_kwargs"]["note"] == "ab"
    assert stored[1]["data"]["content"][0]["text"] == "block text"


@pytest.mark.parametrize("field", ["user_id", "thread_id", "project_id"])
def test_ids_with_a_control_character_are_refused(agent: Client, field: str) -> None:
    response = post_raw(agent, json.dumps(turn_body(**{field: "a\u0000b"})))
    assert response.status_code == 400
    assert error_of(response)["message"].startswith(f"{field}:")


def test_a_message_id_with_a_control_character_is_refused(agent: Client) -> None:
    body = turn_body({"id": "m\u00001", "role": "user", "content": "x"})
    response = post_raw(agent, json.dumps(body))
    assert response.status_code == 400
    assert error_of(response)["message"] == "messages[0].id: must not contain control characters"


def test_no_nul_reaches_a_card_file_or_the_memory_block(
    agent: Client, openai_stub: OpenAIStub, memory_root: Path
) -> None:
    # The user's NUL is removed on the way in; the model echoing one back is cleaned too.
    openai_stub.reply_tool_call(
        {
            "facts": [
                fact_candidate(
                    key="drink",
                    content="User prefers\u0000 tea over coffee.",
                    category="preference",
                    evidence_text="prefer\u0000 tea over coffee",
                )
            ]
        }
    )
    body = turn_body({"id": "u1", "role": "user", "content": "I prefer\u0000 tea over coffee, always."})
    assert post_raw(agent, json.dumps(body), path="/api/v1/flush").status_code == 202
    assert "\\u0000" not in json.dumps(openai_stub.requests[0]), "the model was shown a NUL"
    cards = list((memory_root / "users").rglob("*.md"))
    assert len(cards) == 1
    assert b"\x00" not in cards[0].read_bytes()
    assert "User prefers tea over coffee." in cards[0].read_text()
    context = agent.get("/api/v1/context", {"user_id": "alice", "agent_name": "coder"}).json()
    assert "prefers tea over coffee" in context["text"] and "\x00" not in context["text"]


def test_the_memory_block_drops_control_characters_of_a_hand_written_card(make_card) -> None:
    # Written past the turn cleaning (hand edit, older version). No NUL here: PostgreSQL's
    # mirror cannot hold one at all; the rule is the same for every control character.
    save_card(make_card(user_id="alice", content="Likes\x01 green\x1b[31m tea\x07"), actor="t")
    text = render_context(user_id="alice", agent_name="coder").text
    assert "Likes green[31m tea" in text
    assert not any(ord(c) < 32 and c not in "\n\t\r" for c in text)


# --- validation errors as short lines --------------------------------------------------------------


def test_a_malformed_content_list_names_the_field_in_one_short_line(agent: Client) -> None:
    messages: list[dict[str, Any]] = [
        {"id": "m1", "role": "user", "content": "ok"},
        {"id": "m2", "role": "user", "content": "ok"},
        {"id": "m3", "role": "user", "content": [1, {"type": "text"}]},
    ]
    response = post_raw(agent, json.dumps(turn_body(*messages)))
    assert response.status_code == 400
    message = error_of(response)["message"]
    assert message == "messages[2].content[0]: Input should be a valid string or a valid dictionary"


def test_each_problem_of_a_message_gets_its_own_line(agent: Client) -> None:
    body = turn_body({"id": "m1", "role": "user", "content": 12, "additional_kwargs": []})
    message = error_of(post_raw(agent, json.dumps(body)))["message"]
    assert message.split("; ") == [
        "messages[0].content: Input should be a valid string or a valid list",
        "messages[0].additional_kwargs: Input should be a valid dictionary",
    ]
    assert "\n" not in message and "pydantic.dev" not in message


def test_the_write_side_reports_langchains_own_errors_the_same_way() -> None:
    with pytest.raises(TurnRejected) as caught:
        record_turn(user_id="alice", agent_name="coder", thread_id="t1", messages=[{"role": "user", "content": [7]}])
    assert str(caught.value) == "messages[0].content[0]: Input should be a valid string or a valid dictionary"


@pytest.mark.parametrize(
    "overrides",
    [
        {"user_id": "x" * 201},
        {"thread_id": None},
        {"agent_name": "Not An Agent!"},
        {"messages": []},
        {"messages": [{"id": "m1", "role": "wizard", "content": "x"}]},
        {"messages": [{"id": "m1", "role": "user", "content": "a"}, {"id": "m1", "role": "user", "content": "b"}]},
        {"messages": [{"id": "m\x001", "role": "user", "content": "x"}]},
        {"messages": [{"id": "m1", "role": "user", "content": "hi", "additional_kwargs": {"score": float("inf")}}]},
        {"messages": [{"id": "m1", "role": "user", "content": "hi", "created_at": "2023-03-14T09:26:53"}]},
        {"messages": [{"id": "m1", "role": "user", "content": "hi", "additional_kwargs": {"created_at": "soon"}}]},
    ],
)
def test_every_door_refuses_a_bad_turn_with_the_same_words(agent: Client, overrides: dict[str, Any]) -> None:
    body = turn_body(**overrides)
    over_http = error_of(post_raw(agent, json.dumps(body)))["message"]
    with pytest.raises(TurnRejected) as written:
        record_turn(**body)
    ctx = MemoryContext(user_id=body["user_id"], agent_name=body["agent_name"], thread_id=body["thread_id"])
    with pytest.raises(MemoryRejected) as in_process:
        LocalMemory().record_turn(ctx, body["messages"])
    assert over_http == str(written.value) == str(in_process.value)
    assert Turn.objects.count() == 0


# --- wrong keys throttled per address ----------------------------------------------------------------


def test_wrong_keys_from_one_address_are_throttled_and_a_valid_key_still_passes(
    key_pair: tuple[ApiKey, str], settings: Any
) -> None:
    settings.API_AUTH_FAILURE_LIMIT = 3
    guesser = Client(REMOTE_ADDR="203.0.113.7")
    params = {"user_id": "alice", "agent_name": "__default__"}  # no agent is known in a fresh store
    statuses = [
        guesser.get("/api/v1/context", params, HTTP_AUTHORIZATION=f"Bearer mem_guess{i}").status_code for i in range(5)
    ]
    assert statuses == [401, 401, 401, 429, 429]
    throttled = guesser.get("/api/v1/context", params, HTTP_AUTHORIZATION="Bearer mem_guess9")
    assert error_of(throttled)["code"] == "too_many_failures"
    assert 1 <= int(throttled["Retry-After"]) <= settings.API_AUTH_FAILURE_WINDOW_SECONDS
    # A valid key from the same address (an agent behind the same NAT or proxy) is not locked out.
    valid = guesser.get("/api/v1/context", params, HTTP_AUTHORIZATION=f"Bearer {key_pair[1]}")
    assert valid.status_code == 200
    # Another address has its own count.
    other = Client(REMOTE_ADDR="198.51.100.2").get("/api/v1/context", params, HTTP_AUTHORIZATION="Bearer mem_x")
    assert other.status_code == 401


def test_the_failure_window_ends(settings: Any) -> None:
    settings.API_AUTH_FAILURE_LIMIT = 1
    settings.API_AUTH_FAILURE_WINDOW_SECONDS = 300
    assert api_auth.record_failure("192.0.2.1", now=3_000.0).allowed
    assert not api_auth.record_failure("192.0.2.1", now=3_100.0).allowed
    assert api_auth.record_failure("192.0.2.1", now=3_301.0).allowed


def _fail_in_child(times: int) -> None:
    api_auth._local.connections = {}  # a forked child must not share the parent's SQLite handle
    for _ in range(times):
        api_auth.record_failure("192.0.2.9", now=9_000.0)


def test_failure_counts_are_shared_between_processes(settings: Any) -> None:
    settings.API_AUTH_FAILURE_LIMIT = 5
    child = multiprocessing.get_context("fork").Process(target=_fail_in_child, args=(4,))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert api_auth.record_failure("192.0.2.9", now=9_001.0).allowed
    assert not api_auth.record_failure("192.0.2.9", now=9_002.0).allowed


# --- keys limited to some users (tenants) ---------------------------------------------------------------


@pytest.fixture
def tenant_agent() -> Client:
    _, raw = ApiKey.issue("acme agents", allowed_users=["acme:*", "bob"])
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


def _four_requests(client: Client, user_id: str) -> list[tuple[str, int, str]]:
    body = json.dumps(turn_body(user_id=user_id))
    answers = [
        ("turns", post_raw(client, body)),
        ("flush", post_raw(client, body, path="/api/v1/flush")),
        ("context", client.get("/api/v1/context", {"user_id": user_id, "agent_name": "coder"})),
        ("search", client.get("/api/v1/search", {"user_id": user_id, "agent_name": "coder", "q": "Go"})),
    ]
    return [(name, r.status_code, r.json().get("error", {}).get("code", "")) for name, r in answers]


@pytest.mark.parametrize("user_id", ["acme:alice", "acme:", "bob"])
def test_a_tenant_key_serves_its_users_on_every_endpoint(tenant_agent: Client, user_id: str) -> None:
    assert [status for _, status, _ in _four_requests(tenant_agent, user_id)] == [202, 202, 200, 200]


@pytest.mark.parametrize("user_id", ["globex:carol", "acme", "ACME:alice", "bobby", "xacme:alice", "alice"])
def test_a_tenant_key_gets_403_for_any_other_user_on_every_endpoint(tenant_agent: Client, user_id: str) -> None:
    answers = _four_requests(tenant_agent, user_id)
    assert [(status, code) for _, status, code in answers] == [(403, "user_not_allowed")] * 4
    assert Turn.objects.count() == 0


def test_keys_without_a_user_limit_keep_serving_every_user(agent: Client) -> None:
    for user_id in ("acme:alice", "globex:carol", "alice"):
        assert [status for _, status, _ in _four_requests(agent, user_id)] == [202, 202, 200, 200]


def test_create_api_key_takes_user_patterns(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("create_api_key", "acme", "--users", "acme:*, bob,acme:*", "--agents", "coder")
    raw = capsys.readouterr().out.strip()
    key = ApiKey.objects.get(name="acme")
    assert key.allowed_users == ["acme:*", "bob"]
    assert AuditEvent.objects.get(target=key.prefix).details["allowed_users"] == ["acme:*", "bob"]
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/v1/context", {"user_id": "acme:x", "agent_name": "coder"}).status_code == 200
    assert client.get("/api/v1/context", {"user_id": "carol", "agent_name": "coder"}).status_code == 403


def test_create_api_key_refuses_a_bad_user_pattern() -> None:
    with pytest.raises(CommandError, match="control characters"):
        call_command("create_api_key", "bad", "--users", "acme:\x01*")


def test_the_dashboard_form_creates_a_tenant_key(admin_client_: Client) -> None:
    response = admin_client_.post(
        "/agents/keys/", {"name": "acme from the dashboard", "allowed_agents": "", "allowed_users": "acme:*"}
    )
    assert response.status_code == 200
    assert "acme:*" in response.content.decode()
    key = ApiKey.objects.get(name="acme from the dashboard")
    assert key.allowed_users == ["acme:*"]
    page = admin_client_.get("/agents/").content.decode()
    assert "acme:*" in page and "every user" not in page.split("acme from the dashboard")[1].split("</tr>")[0]


# --- the endpoint fuzzed inside a message (where NaN and NUL used to get through) ------------------

hostile_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and ±Infinity included
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=20),  # NUL and other controls included
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@hypothesis_settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(field=st.sampled_from(["content", "additional_kwargs", "tool_calls", "name", "id"]), value=hostile_values)
def test_any_value_inside_a_message_is_202_or_400_and_never_stores_a_control_character(field: str, value: Any) -> None:
    _, raw = ApiKey.issue("fuzz")  # a key per example: the rate limit never interferes
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    message: dict[str, Any] = {"id": "u1", "role": "assistant", "content": "hi", field: value}
    body = turn_body(message, thread_id=f"t-{ApiKey.objects.count()}")
    response = post_raw(client, json.dumps(body))  # json.dumps writes NaN/Infinity as Python does
    assert response.status_code in (202, 400), response.content[:300]
    if response.status_code == 400:
        assert "\n" not in error_of(response)["message"]
    for stored in Turn.objects.values_list("messages", flat=True):
        text = json.dumps(stored, allow_nan=False)
        assert not any(f"\\u{n:04x}" in text for n in (*range(0, 9), 11, 12, *range(14, 32), *range(127, 160)))
