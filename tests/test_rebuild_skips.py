"""What a rebuild may skip (issue 23): unchanged mirror rows, and re-reading files that
did not change since its scan began — without missing a change."""

from __future__ import annotations

import os
from io import StringIO

import pytest
from django.core.management import call_command

from facts import mirror
from facts.models import FactCard
from facts.storage import snapshots
from facts.storage.store import Store
from facts.storage.writer import save_card

pytestmark = pytest.mark.django_db


def test_it_catches_a_hand_edit_made_after_the_scan_even_with_an_old_mtime(
    store: Store, make_card, monkeypatch
) -> None:
    card = save_card(make_card(content="Prefers spaces."), actor="seed")
    other = save_card(make_card(content="Likes tea."), actor="seed")
    # No margin: only the file's ctime against the scan's start decides.
    monkeypatch.setattr(snapshots, "_CTIME_MARGIN_NS", 0)
    snap = snapshots.snapshot(store)
    path = store.card_path(card)
    before = os.stat(path)
    # Copied back from somewhere with its old times kept (cp -p, rsync -t, tar).
    path.write_text(path.read_text().replace("Prefers spaces.", "Prefers tabs."))
    os.utime(path, ns=(before.st_atime_ns - 10**12, before.st_mtime_ns - 10**12))
    changed, gone = snapshots.refresh(store, snap)
    assert [c.content for c in changed] == ["Prefers tabs."]
    assert gone == []
    assert snap.cards[other.id].card.content == "Likes tea."


def test_it_applies_a_hand_edit_made_during_the_rebuild(store: Store, make_card, monkeypatch) -> None:
    card = save_card(make_card(content="Prefers spaces."), actor="seed")
    real = mirror.rebuild_mirror

    def edit_then_mirror(snap, **kwargs):
        path = store.card_path(card)
        path.write_text(path.read_text().replace("Prefers spaces.", "Prefers tabs."))
        return real(snap, **kwargs)

    monkeypatch.setattr(mirror, "rebuild_mirror", edit_then_mirror)
    call_command("reindex", "--no-progress", stdout=StringIO())
    assert FactCard.objects.get(id=card.id).content == "Prefers tabs."


def test_a_tampered_mirror_row_is_put_right_by_reindex_no_cache(make_card) -> None:
    card = save_card(make_card(content="Prefers spaces."), actor="seed")
    FactCard.objects.filter(id=card.id).update(content="Changed in the database, not the file.")
    call_command("reindex", "--no-progress", stdout=StringIO())
    # The file did not change, so the plain rebuild leaves the row (and --check agrees).
    assert FactCard.objects.get(id=card.id).content == "Changed in the database, not the file."
    call_command("reindex", "--no-progress", "--no-cache", stdout=StringIO())
    assert FactCard.objects.get(id=card.id).content == "Prefers spaces."


def test_a_hand_edited_card_is_tokenized_once_by_reindex(store: Store, make_card, monkeypatch) -> None:
    from retrieval import derived, indexrows
    from retrieval.search import search

    card = save_card(make_card(content="Prefers spaces."), actor="seed")
    path = store.card_path(card)
    path.write_text(path.read_text().replace("Prefers spaces.", "Prefers tabs, edited by hand."))
    indexrows._recent_terms.clear()
    seen: list[str] = []
    real = derived.document_terms

    def counting(text: str) -> str:
        seen.append(text)
        return real(text)

    monkeypatch.setattr(derived, "document_terms", counting)
    call_command("reindex", "--no-progress", stdout=StringIO())
    assert seen.count("Prefers tabs, edited by hand.") == 1
    assert FactCard.objects.get(id=card.id).content == "Prefers tabs, edited by hand."
    hits = search("tabs", user_id=card.user_id, agent_name=card.agent_name)  # type: ignore[arg-type]
    assert [hit.id for hit in hits] == [card.id]
