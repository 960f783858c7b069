"""`facts.storage.bulk.insert` stores exactly what `bulk_create` stores (SQLite here, PostgreSQL
under `make test-postgres`)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import IntegrityError, connection, transaction

from facts.enums import CardStatus
from facts.models import Candidate, ExtractedMessage, ExtractionRun, FactCard, FactRevision
from facts.storage import bulk
from facts.storage.writer import mirror_row

pytestmark = pytest.mark.django_db

HOSTILE = '\'; DROP TABLE facts_candidate; -- "%s" %(x)s ? \x01 </memory> 中文 \U0001f600'


def _rows(model, **filters) -> list[dict]:
    skip = {"id", "created_at"} if model is not FactCard else set()
    rows = model.objects.filter(**filters).order_by("pk").values()  # the order of insertion
    return [{k: v for k, v in row.items() if k not in skip} for row in rows]


def _run() -> ExtractionRun:
    return ExtractionRun.objects.create(user_id="u", agent_name="a", thread_id="t", filtered_rows=[])


def _candidates(run: ExtractionRun, tag: str) -> list[Candidate]:
    return [
        Candidate(
            run=run,
            kind=Candidate.Kind.FACT,
            position=i,
            user_id=tag,
            agent_name="a",
            key=f"k{i}",
            content=HOSTILE,
            category="preference",
            confidence=None if i == 1 else 0.9,
            raw={"key": f"k{i}", "nested": [1, {"x": None}], "text": HOSTILE} if i else None,
            verdict=Candidate.Verdict.ACCEPTED if i % 2 else Candidate.Verdict.REJECTED,
            reasons=["scope_thread", "low_confidence"] if i % 2 == 0 else [],
        )
        for i in range(3)
    ]


def test_candidates_are_stored_as_bulk_create_stores_them() -> None:
    run = _run()
    Candidate.objects.bulk_create(_candidates(run, "orm"))
    bulk.insert(Candidate, _candidates(run, "fast"))
    orm, fast = _rows(Candidate, user_id="orm"), _rows(Candidate, user_id="fast")
    assert [dict(r, user_id="") for r in fast] == [dict(r, user_id="") for r in orm]
    stored = Candidate.objects.filter(user_id="fast").order_by("position")
    assert stored[2].raw["text"] == HOSTILE and stored[1].confidence is None
    assert all(c.created_at is not None for c in stored), "auto_now_add is filled in"


def test_ignore_conflicts_skips_rows_already_there() -> None:
    run = _run()
    first = [ExtractedMessage(user_id="u", agent_name="a", thread_id="t", message_id=m, run=run) for m in "ab"]
    bulk.insert(ExtractedMessage, first, ignore_conflicts=True)
    again = [ExtractedMessage(user_id="u", agent_name="a", thread_id="t", message_id=m, run=run) for m in "abc"]
    bulk.insert(ExtractedMessage, again, ignore_conflicts=True)
    assert sorted(ExtractedMessage.objects.values_list("message_id", flat=True)) == ["a", "b", "c"]
    with pytest.raises(IntegrityError), transaction.atomic():
        bulk.insert(ExtractedMessage, again[:1])


def test_an_upsert_overwrites_only_the_named_fields(make_card) -> None:
    card = make_card(content=HOSTILE, last_confirmed_at=datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=UTC))
    row = mirror_row(card, "users/alice/x.md", "d1")
    bulk.insert(FactCard, [row], update_conflicts=["content", "revision"], unique_fields=["id"])
    FactCard.objects.bulk_create([mirror_row(card, "users/alice/y.md", "d2")], ignore_conflicts=True)
    expected = _rows(FactCard, id=card.id)
    changed = mirror_row(card.model_copy(update={"content": "new", "revision": 2}), "other/path.md", "d3")
    bulk.insert(FactCard, [changed], update_conflicts=["content", "revision"], unique_fields=["id"])
    after = _rows(FactCard, id=card.id)
    assert after == [dict(expected[0], content="new", revision=2)], "path and digest were not in the update list"
    stored = FactCard.objects.get(id=card.id)
    assert stored.last_confirmed_at == card.last_confirmed_at and stored.status == CardStatus.ACTIVE


def test_a_mirror_row_is_the_same_through_either_path(make_card) -> None:
    a = make_card(content=HOSTILE, expires_at=datetime(2027, 5, 6, tzinfo=UTC))
    FactCard.objects.bulk_create([mirror_row(a, "p", "d")])
    other = a.id[:-1] + ("y" if a.id.endswith("x") else "x")  # same length: ids are varchar(17) on PostgreSQL
    bulk.insert(FactCard, [mirror_row(a.model_copy(update={"id": other}), "p", "d")])
    orm, fast = _rows(FactCard, id=a.id), _rows(FactCard, id=other)
    assert [dict(r, id="") for r in fast] == [dict(r, id="") for r in orm]
    # the same bytes in the table, not only the same values once read back
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {FactCard._meta.db_table} ORDER BY id")
        stored = [row[1:] for row in cursor.fetchall()]
    assert stored[0] == stored[1]


def test_history_rows_and_nothing_at_all() -> None:
    bulk.insert(FactRevision, [])
    bulk.insert(FactRevision, [FactRevision(fact_id="fact_1", revision=1, text=HOSTILE, actor="x", reason="")])
    assert FactRevision.objects.get().text == HOSTILE
