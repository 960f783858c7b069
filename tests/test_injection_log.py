"""The injection log: what each agent was shown, kept compactly, pruned, erased, and
rebuilt for a moment in time."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from facts import injections
from facts.erasure.run import erase
from facts.erasure.scope import Scope as ErasureScope
from facts.models import InjectedFact, Injection
from facts.storage.store import Bucket
from facts.storage.writer import save_card, update_card
from memoryadmin import api_service
from memoryadmin.api_service import Scope

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _inline(settings: Any) -> None:
    settings.API_USAGE_FLUSH_SECONDS = 0


@pytest.fixture
def cards(make_card: Any, store: Any) -> list[Any]:
    return [
        save_card(make_card(content="用户偏好用中文解释技术问题。", key="lang"), actor="t"),
        save_card(make_card(content="The user deploys with Docker Compose.", key="deploy"), actor="t"),
    ]


def test_it_records_each_context_served_with_its_cards_revisions_tokens_and_hash(cards: list[Any]) -> None:
    body = api_service.serve_context(Scope("alice", "coder"), door="mcp")
    entry = Injection.objects.get()
    assert (entry.user_id, entry.agent_name, entry.kind, entry.mode, entry.door) == (
        "alice",
        "coder",
        "context",
        "auto",
        "mcp",
    )
    assert entry.tokens == body["tokens"] > 0
    assert entry.text_sha256 == hashlib.sha256(body["text"].encode()).hexdigest()
    lines = set(entry.facts.values_list("fact_id", "revision"))
    assert lines == {(c.id, 1) for c in cards} and set(body["included"]) == {c.id for c in cards}


def test_it_records_search_answers(cards: list[Any]) -> None:
    results = api_service.serve_search(Scope("alice", "coder"), "Docker")
    entry = Injection.objects.get(kind="search")
    assert [r["id"] for r in results] == list(entry.facts.order_by("position").values_list("fact_id", flat=True))
    assert entry.tokens > 0


def test_buffered_entries_are_written_by_the_flush(cards: list[Any], settings: Any, monkeypatch: Any) -> None:
    settings.API_USAGE_FLUSH_SECONDS = 3600
    monkeypatch.setattr(api_service, "_ensure_flusher", lambda: None)
    api_service.serve_context(Scope("alice", "coder"))
    assert not Injection.objects.exists()
    api_service.flush_usage()
    assert Injection.objects.count() == 1 and InjectedFact.objects.count() == 2


def test_it_shows_what_the_agent_saw_before_a_card_was_corrected(cards: list[Any]) -> None:
    api_service.serve_context(Scope("alice", "coder"))
    seen_then = timezone.now()
    lang = cards[0]
    update_card(
        Bucket(user_id="alice", agent_name="coder"),
        lang.id,
        lambda c: c.model_copy(update={"content": "User prefers English."}),
        actor="t",
    )
    api_service.serve_context(Scope("alice", "coder"))
    then = injections.seen_at("alice", "coder", seen_then)
    now = injections.seen_at("alice", "coder", timezone.now())
    assert {f.card.content for f in then.facts if f.card} >= {"用户偏好用中文解释技术问题。"}
    assert "User prefers English." in {f.card.content for f in now.facts if f.card}
    assert {f.revision for f in now.facts if f.fact_id == lang.id} == {2}
    assert injections.seen_at("alice", "coder", seen_then - timedelta(days=1)).injection is None


def test_the_fact_page_source_lists_the_last_servings(cards: list[Any]) -> None:
    api_service.serve_context(Scope("alice", "coder"))
    api_service.serve_search(Scope("alice", "coder"), "Docker", door="local")
    [latest, first] = injections.last_injected(cards[1].id)
    assert (latest.kind, latest.door, first.kind) == ("search", "local", "context")


def test_entries_older_than_the_retention_are_pruned(cards: list[Any], settings: Any) -> None:
    settings.MEMORY_INJECTION_LOG_DAYS = 30
    api_service.serve_context(Scope("alice", "coder"))
    api_service.serve_context(Scope("alice", "coder"))
    old = Injection.objects.order_by("pk").first()
    Injection.objects.filter(pk=old.pk).update(served_at=timezone.now() - timedelta(days=31))
    assert injections.prune() == 1
    assert list(Injection.objects.values_list("pk", flat=True)) != [old.pk] and Injection.objects.count() == 1
    assert not InjectedFact.objects.filter(injection_id=old.pk).exists()


def test_erasing_a_user_deletes_their_log(cards: list[Any], make_card: Any) -> None:
    save_card(make_card(user_id="bob", content="Bob likes tea."), actor="t")
    api_service.serve_context(Scope("alice", "coder"))
    api_service.serve_context(Scope("bob", "coder"))
    erase(ErasureScope.of("alice"), actor="t")
    assert list(Injection.objects.values_list("user_id", flat=True)) == ["bob"]
    # A serving still buffered from before the erasure does not bring the log back.
    stale = injections.Served(
        timezone.now() - timedelta(minutes=1), "alice", "coder", "", "context", "auto", "api", (), "x", 1
    )
    injections.write([stale])
    assert not Injection.objects.filter(user_id="alice").exists()


@pytest.mark.django_db(transaction=True)  # MCP's tools run in another thread
def test_every_door_records_what_it_served(cards: list[Any]) -> None:
    """The JSON API, MCP and the in-process client all go through api_service."""
    from django.test import Client as HttpClient

    from memoryadmin.client import LocalMemory
    from memoryadmin.memory_protocol import MemoryContext
    from memoryadmin.models import ApiKey
    from tests.test_mcp import ALICE, call, in_process

    _key, raw = ApiKey.issue("door test")
    agent = HttpClient(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert agent.get("/api/v1/context", {"user_id": "alice", "agent_name": "coder"}).status_code == 200
    assert agent.get("/api/v1/search", {"user_id": "alice", "agent_name": "coder", "q": "Docker"}).status_code == 200
    call(in_process(ALICE), "memory_context", {})
    LocalMemory().context(MemoryContext(user_id="alice", agent_name="coder"))
    doors = list(Injection.objects.order_by("pk").values_list("door", "kind"))
    assert doors == [("api", "context"), ("api", "search"), ("mcp", "context"), ("local", "context")]


def test_the_worker_sweep_prunes_the_log(cards: list[Any]) -> None:
    from facts.management.commands.db_worker import sweep

    api_service.serve_context(Scope("alice", "coder"))
    Injection.objects.update(served_at=timezone.now() - timedelta(days=400))
    sweep()
    assert not Injection.objects.exists()


def test_forgetting_a_thread_removes_its_cards_from_the_log(make_card: Any, store: Any) -> None:
    from facts.erasure.plan import plan
    from facts.storage.cardfile import Source

    from_thread = save_card(make_card(content="Said in t-9.", source=Source(kind="manual", thread_id="t-9")), actor="t")
    other = save_card(make_card(content="Said elsewhere."), actor="t")
    api_service.serve_context(Scope("alice", "coder"))
    scope = ErasureScope.of("alice", "coder", thread_id="t-9")
    listed = plan(scope).items()
    assert listed["injection_log_entries"] == [] and len(listed["injection_log_cards"]) == 1
    erase(scope, actor="t")
    entry = Injection.objects.get()
    assert list(entry.facts.values_list("fact_id", flat=True)) == [other.id] != [from_thread.id]
