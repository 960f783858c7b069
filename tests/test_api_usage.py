"""Injection and search counters: one UPSERT, buffered off the request path."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from facts.models import FactUsage
from memoryadmin import api_service

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _two_cards(make_card: Any) -> None:
    """Only cards in the mirror are counted: the ids below are two real cards."""
    from facts.storage.writer import save_card

    for fact_id in ("fact_000000000001", "fact_000000000002"):
        save_card(make_card(id=fact_id), actor="t")


def test_it_counts_new_and_existing_cards_in_one_statement(django_assert_num_queries: Any) -> None:
    FactUsage.objects.create(fact_id="fact_000000000001", injected_count=3, searched_count=1)
    with django_assert_num_queries(1, exact=False):
        api_service.write_usage("injected", Counter({"fact_000000000001": 1, "fact_000000000002": 2}))
    one, two = FactUsage.objects.order_by("fact_id")
    assert (one.injected_count, one.searched_count) == (4, 1)
    assert (two.injected_count, two.searched_count) == (2, 0)
    assert one.last_injected_at is not None and one.last_searched_at is None


def test_search_counts_are_kept_apart_from_injections() -> None:
    api_service.write_usage("searched", Counter({"fact_000000000001": 1}))
    api_service.write_usage("searched", Counter({"fact_000000000001": 1}))
    usage = FactUsage.objects.get()
    assert (usage.injected_count, usage.searched_count) == (0, 2)
    assert usage.last_searched_at is not None


def test_deferred_counts_are_buffered_until_flushed(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.API_USAGE_FLUSH_SECONDS = 3600
    monkeypatch.setattr(api_service, "_ensure_flusher", lambda: None)  # flushed by hand below
    api_service.count_usage("injected", ["fact_000000000001", "fact_000000000001", "fact_000000000002"])
    assert not FactUsage.objects.exists()
    api_service.flush_usage()
    assert dict(FactUsage.objects.values_list("fact_id", "injected_count")) == {
        "fact_000000000001": 2,
        "fact_000000000002": 1,
    }
    api_service.flush_usage()  # nothing left: no double counting
    assert FactUsage.objects.get(fact_id="fact_000000000001").injected_count == 2


def test_nothing_to_count_writes_nothing(django_assert_num_queries: Any) -> None:
    with django_assert_num_queries(0):
        api_service.count_usage("injected", [])


def test_counts_for_a_card_that_is_gone_write_nothing(make_card: Any) -> None:
    """A count buffered before an erasure, flushed after it, brings no row back."""
    from facts.storage.writer import save_card

    kept = save_card(make_card(), actor="t")
    api_service.write_usage("injected", Counter({kept.id: 1, "fact_0000000000ff": 5}))
    assert list(FactUsage.objects.values_list("fact_id", flat=True)) == [kept.id]
