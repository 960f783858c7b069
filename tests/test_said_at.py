"""Issue 35: dates through every door. A turn may say when it was said (``created_at``,
ISO 8601 with its offset), each message may say its own; the card extracted from it is
dated then, the candidate and the run record it, far-future, naive and unparsable times
are refused naming the field, and very old ones (backfills) are fine."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from langchain_core.messages import AIMessage, HumanMessage

from facts.curation.review import apply_candidate
from facts.enums import CardStatus
from facts.intake.turns import FUTURE_TOLERANCE, ThreadKey, TurnRejected, clean_said_at, clean_turn
from facts.judging.pipeline import run_turns_now
from facts.models import Candidate, ExtractionRun, FactCard, Turn
from facts.portability import importer
from facts.portability.export import export_user
from facts.storage.store import Store
from memoryadmin.client import LocalMemory, MemoryClient
from memoryadmin.memory_protocol import MemoryContext, MemoryRejected
from memoryadmin.models import ApiKey
from retrieval.search import age_days, decay_for, order_factor, search
from tests.factories import fact_candidate
from tests.openai_stub import OpenAIStub
from tests.test_export import _jsonl, _members, _remove_by_hand, _rewrite
from tests.test_middleware import agent_with, run
from tests.test_middleware_fakes import DjangoTransport, ScriptedChatModel

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SAID = "2023-03-14T09:26:53+01:00"
SAID_UTC = datetime(2023, 3, 14, 8, 26, 53, tzinfo=UTC)
THREAD: ThreadKey = {"user_id": "alice", "agent_name": "coder", "thread_id": "t1"}
USER_WORDS = "我主要做 Python 后端开发，平时请用中文解释技术问题。"


def messages(**said: str) -> list[dict[str, Any]]:
    """The article's turn; `said` gives a message (u1, a1) its own created_at."""
    out: list[dict[str, Any]] = [
        {"id": "u1", "role": "user", "content": USER_WORDS},
        {"id": "a1", "role": "assistant", "content": "好的，之后我会用中文解释。"},
    ]
    for message in out:
        if message["id"] in said:
            message["created_at"] = said[message["id"]]
    return out


def stored_said(turn: Turn) -> list[str | None]:
    return [m["data"]["additional_kwargs"].get("created_at") for m in turn.messages]


@pytest.fixture
def model(openai_stub: OpenAIStub) -> OpenAIStub:
    """The extraction model proposes the article's durable preference, quoted from u1."""
    openai_stub.reply_tool_call({"facts": [fact_candidate()], "summaries": [], "confirmations": []})
    return openai_stub


def the_card() -> FactCard:
    return FactCard.objects.get(user_id="alice", key="response_language", status=CardStatus.ACTIVE)


# --- the rule (facts/intake/turns.py) --------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2023-03-14T09:26:53+01:00", SAID_UTC),
        ("2023-03-14T08:26:53Z", SAID_UTC),
        ("2023-03-14T08:26:53.987654+00:00", SAID_UTC),
        ("2023-03-14 03:26:53-05:00", SAID_UTC),
        (SAID_UTC, SAID_UTC),
        ("1971-01-01T00:00:00Z", datetime(1971, 1, 1, tzinfo=UTC)),
        (None, None),
        ("", None),
    ],
)
def test_it_reads_iso_8601_times_with_their_offset_as_utc(value: Any, expected: datetime | None) -> None:
    assert clean_said_at("created_at", value, now=NOW) == expected


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("2023-03-14T09:26:53", "has no time zone: add Z or an offset like +02:00"),
        ("2023-03-14", "has no time zone"),
        (datetime(2023, 3, 14, 9, 26), "has no time zone"),
        ("yesterday", "is not an ISO 8601 time with its offset"),
        ("14/03/2023 09:26 +01:00", "is not an ISO 8601 time with its offset"),
        (1678782413, "must be a string"),
        ("2026-12-01T12:05:01Z", "is in the future (more than 5 minutes after this server's clock"),
        ("2030-01-01T00:00:00Z", "is in the future"),
        ("1969-12-31T23:59:59Z", "is before 1970-01-01T00:00:00Z"),
        ("0001-01-01T00:00:00+01:00", "is out of range"),
    ],
)
def test_it_refuses_a_time_it_cannot_believe_naming_the_field(value: Any, says: str) -> None:
    with pytest.raises(TurnRejected, match=r"^created_at: ") as refused:
        clean_said_at("created_at", value, now=NOW)
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_a_clock_a_few_minutes_ahead_is_tolerated() -> None:
    assert timedelta(minutes=5) == FUTURE_TOLERANCE
    assert clean_said_at("created_at", "2026-12-01T12:04:59Z", now=NOW) == NOW + timedelta(minutes=4, seconds=59)


def test_every_message_carries_its_own_time_else_the_turns() -> None:
    turn = clean_turn(**THREAD, messages=messages(a1="2023-03-14T08:30:00Z"), created_at=SAID, now=NOW)
    said = [m["data"]["additional_kwargs"]["created_at"] for m in turn.messages]
    assert said == ["2023-03-14T08:26:53Z", "2023-03-14T08:30:00Z"]
    plain = clean_turn(**THREAD, messages=messages(), now=NOW)
    assert all("created_at" not in m["data"]["additional_kwargs"] for m in plain.messages)


def test_a_bad_message_time_names_the_message() -> None:
    with pytest.raises(TurnRejected, match=r"^messages\[1\]\.created_at: '2023-03-14T09:26' has no time zone"):
        clean_turn(**THREAD, messages=messages(a1="2023-03-14T09:26"), now=NOW)
    langchain_shape = {"type": "human", "data": {"content": "hi", "additional_kwargs": {"created_at": "2999-01-01Z"}}}
    with pytest.raises(TurnRejected, match=r"^messages\[0\]\.created_at: "):
        clean_turn(**THREAD, messages=[langchain_shape], now=NOW)


# --- the API ------------------------------------------------------------------------


@pytest.fixture
def agent() -> Client:
    _key, secret = ApiKey.issue("t")
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


def post(agent: Client, path: str, body: dict[str, Any]) -> Any:
    return agent.post(path, data=json.dumps(body), content_type="application/json")


def test_a_turn_posted_with_its_time_makes_a_card_said_then(agent: Client, model: OpenAIStub) -> None:
    response = post(agent, "/api/v1/flush", {**THREAD, "created_at": SAID, "messages": messages()})
    assert response.status_code == 202, response.content
    card = the_card()
    assert card.created_at == SAID_UTC and card.updated_at > SAID_UTC
    candidate = Candidate.objects.get(fact_id=card.id)
    assert candidate.said_at == SAID_UTC
    run = ExtractionRun.objects.get()
    assert [row.get("said_at") for row in run.filtered_rows] == ["2023-03-14T08:26:53Z"] * 2
    # The model is shown the conversation as before: the time is the record's, not the prompt's.
    sent = json.loads(model.requests[0]["messages"][1]["content"])["conversation"]
    assert all(set(row) == {"id", "role", "content"} for row in sent)


def test_a_message_time_wins_over_the_turns(agent: Client, model: OpenAIStub) -> None:
    body = {**THREAD, "created_at": "2024-01-01T00:00:00Z", "messages": messages(u1=SAID)}
    assert post(agent, "/api/v1/flush", body).status_code == 202
    assert the_card().created_at == SAID_UTC


def test_a_turn_posted_without_a_time_is_dated_when_it_is_extracted(agent: Client, model: OpenAIStub) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    assert post(agent, "/api/v1/flush", {**THREAD, "messages": messages()}).status_code == 202
    card = the_card()
    assert card.created_at >= before and card.created_at == card.updated_at
    assert Candidate.objects.get(fact_id=card.id).said_at is None


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"created_at": "2023-03-14T09:26:53"}, "created_at", "has no time zone"),
        ({"created_at": "last tuesday"}, "created_at", "is not an ISO 8601 time"),
        ({"created_at": 1678782413}, "created_at", "must be a string"),
        ({"created_at": "2999-01-01T00:00:00Z"}, "created_at", "is in the future"),
        ({"messages": messages(u1="soon")}, "messages[0].created_at", "is not an ISO 8601 time"),
    ],
)
def test_the_api_refuses_a_bad_time_with_a_400_naming_the_field(
    agent: Client, body: dict[str, Any], field: str, says: str
) -> None:
    for path in ("/api/v1/turns", "/api/v1/flush"):
        response = post(agent, path, {**THREAD, "messages": messages(), **body})
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "invalid_field"
        assert error["message"].startswith(f"{field}: ") and says in error["message"]
    assert not Turn.objects.exists(), "nothing stored"


def test_search_decays_a_backfilled_card_by_when_it_was_said(agent: Client, model: OpenAIStub) -> None:
    assert post(agent, "/api/v1/flush", {**THREAD, "created_at": SAID, "messages": messages()}).status_code == 202
    [hit] = search("中文 解释", user_id="alice", agent_name="coder", now=NOW)
    assert hit.created_at == SAID_UTC
    age = age_days(hit.created_at, NOW)
    assert decay_for(age) < 0.01, "the article's decay, of when it was said"
    # Issue 36: search orders by that decay at MEMORY_SEARCH_DECAY_WEIGHT (0.1), it does
    # not let it erase the fact (a card written today would have 1.0).
    assert hit.decay == pytest.approx(order_factor(age)) and hit.decay < 0.91


# --- ingest -------------------------------------------------------------------------


def ingest(tmp_path: Path, *lines: dict[str, Any] | str) -> tuple[str, str]:
    path = tmp_path / "turns.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.suppress(CommandError):  # raised when a line failed: its error is in `err`
        call_command("ingest", str(path), "--json", stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def replayed(**fields: Any) -> dict[str, Any]:
    return {**THREAD, "messages": messages(), "model_output": {"facts": [fact_candidate()]}, **fields}


def test_ingest_takes_a_turns_time_and_dates_its_card(tmp_path: Path) -> None:
    out, err = ingest(tmp_path, replayed(created_at=SAID))
    assert err == "", err
    assert json.loads(out)["saved"] == 1
    assert the_card().created_at == SAID_UTC


def test_ingest_takes_each_messages_time(tmp_path: Path) -> None:
    ingest(tmp_path, replayed(messages=messages(u1="2019-07-01T18:00:00-04:00")))
    assert the_card().created_at == datetime(2019, 7, 1, 22, 0, tzinfo=UTC)


def test_ingest_reports_a_bad_time_on_its_line_and_runs_the_others(tmp_path: Path) -> None:
    later = replayed(thread_id="t2", created_at="2024-02-02T10:00:00Z")
    _out, err = ingest(tmp_path, replayed(created_at="2999-01-01T00:00:00Z"), later)
    assert len(err.splitlines()) == 1, err
    assert err.startswith("line 1: created_at: 2999-01-01T00:00:00Z is in the future")
    assert the_card().created_at == datetime(2024, 2, 2, 10, 0, tzinfo=UTC)


def test_ingest_with_a_model_dates_the_card_too(tmp_path: Path, model: OpenAIStub) -> None:
    ingest(tmp_path, {**THREAD, "messages": messages(), "created_at": SAID})
    assert the_card().created_at == SAID_UTC


def test_run_turns_now_takes_a_time(model: OpenAIStub) -> None:
    run_turns_now(**THREAD, messages=messages(), created_at=SAID)
    assert the_card().created_at == SAID_UTC


# --- the in-process memory, the HTTP client, the middleware ---------------------------------


CTX = MemoryContext(user_id="alice", agent_name="coder", thread_id="t1")


def test_local_memory_takes_a_time_and_refuses_a_bad_one(model: OpenAIStub) -> None:
    memory = LocalMemory()
    with pytest.raises(MemoryRejected, match=r"created_at: .* is in the future"):
        memory.record_turn(CTX, messages(), flush=True, created_at=datetime.now(UTC) + timedelta(hours=1))
    memory.record_turn(CTX, messages(), flush=True, created_at=SAID_UTC)
    assert the_card().created_at == SAID_UTC


def test_the_http_client_sends_the_time(model: OpenAIStub) -> None:
    _key, secret = ApiKey.issue("t")
    client = MemoryClient("http://testserver", secret, transport=DjangoTransport(), deliver_queued_on_start=False)
    try:
        with pytest.raises(MemoryRejected, match=r"400 invalid_field: created_at: .* has no time zone"):
            client.record_turn(CTX, messages(), flush=True, created_at=datetime(2023, 3, 14, 9, 26))
        client.record_turn(CTX, messages(), flush=True, created_at=SAID)
    finally:
        client.close()
    assert the_card().created_at == SAID_UTC


def test_the_middleware_carries_a_messages_time(openai_stub: OpenAIStub, settings: Any) -> None:
    settings.MEMORY_DEBOUNCE_SECONDS = 0
    openai_stub.reply_tool_call({"facts": [fact_candidate(evidence_message_id="said-then")]})
    said = HumanMessage(content=USER_WORDS, id="said-then", additional_kwargs={"created_at": SAID})
    agent = agent_with(LocalMemory(), ScriptedChatModel(script=[AIMessage(content="好的。", id="reply")]))
    agent.invoke({"messages": [said]}, context=CTX, config={"configurable": {"thread_id": "t1"}})
    from facts.tasks import process_thread

    process_thread("alice", "coder", "t1", force=True)
    assert the_card().created_at == SAID_UTC


def test_the_middleware_without_times_changes_nothing(openai_stub: OpenAIStub) -> None:
    agent = agent_with(LocalMemory(), ScriptedChatModel())
    run(agent, USER_WORDS)
    turn = Turn.objects.get()
    assert stored_said(turn) == [None, None]


# --- MCP -----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_mcp_remember_takes_a_time_and_refuses_a_future_one(openai_stub: OpenAIStub, settings: Any) -> None:
    from mcp import Client as McpClient

    from memoryadmin.mcp_server import Identity, build_server

    settings.MEMORY_EXTRACTOR = "llm"
    openai_stub.reply_tool_call({"facts": [fact_candidate(evidence_message_id="m1")]})
    identity = Identity(user_id="alice", agent_name="coder", project_id=None, actor="key:test")

    async def main() -> tuple[Any, Any]:
        async with McpClient(build_server(lambda ctx: identity)) as c:
            future = await c.call_tool("memory_remember", {"text": USER_WORDS, "created_at": "2999-01-01T00:00:00Z"})
            kept = await c.call_tool("memory_remember", {"text": USER_WORDS, "created_at": SAID})
            return future, kept

    future, kept = asyncio.run(main())
    assert future.is_error and "created_at: 2999-01-01T00:00:00Z is in the future" in future.content[0].text
    assert kept.structured_content["status"] == "done", kept
    assert the_card().created_at == SAID_UTC


# --- what a backfill does to memory ----------------------------------------------------


def test_an_older_backfill_does_not_replace_what_the_user_said_since(tmp_path: Path) -> None:
    english = "以后请用英文回答技术问题。"
    newer = replayed(
        thread_id="new",
        created_at="2025-06-01T00:00:00Z",
        messages=[{"id": "u1", "role": "user", "content": english}],
        model_output={
            "facts": [fact_candidate(content="用户偏好用英文回答技术问题。", evidence_text="以后请用英文回答技术问题")]
        },
    )
    older = replayed(thread_id="old", created_at="2021-06-01T00:00:00Z")
    ingest(tmp_path, newer, older)
    live = the_card()
    assert live.content == "用户偏好用英文回答技术问题。"
    kept = FactCard.objects.get(key="response_language", status=CardStatus.SUPERSEDED)
    assert kept.superseded_by == live.id and kept.created_at == datetime(2021, 6, 1, tzinfo=UTC)
    newest = replayed(thread_id="newest", created_at="2026-01-01T00:00:00Z")
    ingest(tmp_path, newest)
    assert the_card().created_at == datetime(2026, 1, 1, tzinfo=UTC), "a later statement still replaces it"


def test_an_approved_candidate_is_dated_when_it_was_said(tmp_path: Path, settings: Any) -> None:
    settings.MEMORY_REVIEW_MODE = "manual"
    ingest(tmp_path, replayed(created_at=SAID))
    candidate = Candidate.objects.get(key="response_language")
    assert candidate.review_state == "pending" and candidate.said_at == SAID_UTC
    fact_id = apply_candidate(candidate, actor="rita", note="")
    assert FactCard.objects.get(id=fact_id).created_at == SAID_UTC


def test_a_backfilled_confirmation_never_moves_the_confirmation_date_back(tmp_path: Path) -> None:
    ingest(tmp_path, replayed(created_at="2025-01-01T00:00:00Z"))
    card = the_card()
    confirm = {"confirmations": [{"fact_id": card.id, "evidence_message_id": "u1", "evidence_text": "平时请用中文"}]}
    ingest(tmp_path, replayed(thread_id="t2", created_at="2025-03-01T00:00:00Z", model_output=confirm))
    ingest(tmp_path, replayed(thread_id="t3", created_at="2024-01-01T00:00:00Z", model_output=confirm))
    card = the_card()
    assert card.confirmation_count == 2 and card.last_confirmed_at == datetime(2025, 3, 1, tzinfo=UTC)


# --- import ---------------------------------------------------------------------------


def test_an_exported_backfill_keeps_its_dates_through_import(store: Store, tmp_path: Path) -> None:
    ingest(tmp_path, replayed(created_at=SAID))
    archive = tmp_path / "alice.zip"
    export_user("alice", archive)
    _remove_by_hand(store.root, "alice", _members(archive))
    importer.import_archive(archive, actor="test")
    assert the_card().created_at == SAID_UTC
    assert Candidate.objects.get(key="response_language").said_at == SAID_UTC
    assert stored_said(Turn.objects.get()) == ["2023-03-14T08:26:53Z"] * 2


def test_import_refuses_a_turn_whose_time_no_door_would_take(store: Store, tmp_path: Path) -> None:
    ingest(tmp_path, replayed(created_at=SAID))
    archive = tmp_path / "alice.zip"
    export_user("alice", archive)
    members = _members(archive)
    _remove_by_hand(store.root, "alice", members)
    rows = _jsonl(members["history/turns.jsonl"])
    rows[0]["messages"][1]["data"]["additional_kwargs"]["created_at"] = "2023-03-14T09:26:53"
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    bad = _rewrite(archive, tmp_path / "bad.zip", change={"history/turns.jsonl": data}, rehash=True)
    with pytest.raises(importer.ImportRefused, match=r"turns.jsonl line 1: messages\[1\]\.created_at: .*no time zone"):
        importer.import_archive(bad, actor="test")
    assert not FactCard.objects.filter(user_id="alice").exists()


# --- the dashboard ----------------------------------------------------------------------


def test_the_dashboard_shows_when_a_fact_was_said(viewer_client: Client, tmp_path: Path) -> None:
    ingest(tmp_path, replayed(created_at=SAID))
    card = the_card()
    detail = viewer_client.get(f"/facts/{card.id}/").content.decode()
    said = detail[detail.index('id="said-at"') :]
    assert said.startswith('id="said-at">2023-03-14 08:26 UTC') and "dated from its conversation" in said[:300]
    assert "said 2023-03-14 08:26 UTC" in detail, "the evidence message says when"
    listed = viewer_client.get("/facts/", {"user": "alice", "agent": "coder"}).content.decode()
    assert "<th>Said</th>" in listed and "<td>2023-03-14</td>" in listed
    candidate = Candidate.objects.get(fact_id=card.id)
    page = viewer_client.get(f"/review/{candidate.pk}/").content.decode()
    assert 'id="said-at">2023-03-14 08:26 UTC' in page


def test_a_fact_said_when_it_was_written_shows_one_time(viewer_client: Client, tmp_path: Path) -> None:
    ingest(tmp_path, replayed())
    detail = viewer_client.get(f"/facts/{the_card().id}/").content.decode()
    said = detail[detail.index('id="said-at"') :]
    assert "dated from its conversation" not in said[: said.index("</dd>")]


def test_the_candidate_page_says_an_older_backfill_would_not_replace_the_live_card(
    viewer_client: Client, tmp_path: Path, settings: Any
) -> None:
    ingest(tmp_path, replayed(thread_id="new", created_at="2025-06-01T00:00:00Z"))
    settings.MEMORY_REVIEW_MODE = "manual"
    english = "以后请用英文回答技术问题。"
    older = replayed(
        thread_id="old",
        created_at="2021-06-01T00:00:00Z",
        messages=[{"id": "u1", "role": "user", "content": english}],
        model_output={
            "facts": [fact_candidate(content="用户偏好用英文回答技术问题。", evidence_text="以后请用英文回答技术问题")]
        },
    )
    ingest(tmp_path, older)
    pending = Candidate.objects.get(thread_id="old")
    assert pending.review_state == "pending" and pending.reasons == []
    page = viewer_client.get(f"/review/{pending.pk}/").content.decode()
    assert "said 2025-06-01 — said after this candidate: approval files this one as history" in page
