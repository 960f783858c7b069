"""The cache of derived per-card data (issue 23): a rebuild re-does only what changed,
``--no-cache`` ignores the cache, ``--check`` finds a corrupted entry."""

from __future__ import annotations

import shutil
from collections.abc import Sequence

import numpy as np
import pytest

from facts.storage.store import Store
from facts.storage.writer import delete_card, save_card
from retrieval import derived, embedding, indexconn
from retrieval.search import search
from tests.conftest import FIXED_NOW
from tests.conftest import reindex_check as _check
from tests.conftest import reindex_quietly as _reindex

pytestmark = pytest.mark.django_db


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The texts tokenized and embedded from now on."""
    seen: dict[str, list[str]] = {"tokenized": [], "embedded": []}
    tokenize, embed = derived.document_terms, embedding.embed

    def counting_tokenize(text: str) -> str:
        seen["tokenized"].append(text)
        return tokenize(text)

    def counting_embed(texts: Sequence[str]) -> np.ndarray:
        seen["embedded"].extend(texts)
        return embed(texts)

    monkeypatch.setattr(derived, "document_terms", counting_tokenize)
    monkeypatch.setattr(embedding, "embed", counting_embed)
    return seen


def _found(query: str) -> list[str]:
    return [hit.id for hit in search(query, user_id="alice", agent_name="coder", now=FIXED_NOW)]


def test_it_rebuilds_after_a_hand_edit_by_redoing_only_the_edited_card(
    embeddings: None, make_card, store: Store, work: dict[str, list[str]]
) -> None:
    cards = [save_card(make_card(content=f"Deploys service number {n} on Fridays."), actor="t") for n in range(4)]
    work["tokenized"].clear()
    work["embedded"].clear()
    _reindex()
    # The write path already filled the cache: a rebuild tokenizes and embeds nothing.
    assert work["tokenized"] == [] and work["embedded"] == []
    store.write_card(cards[2].model_copy(update={"content": "Keeps the staging database in 时区 UTC."}))
    _reindex()
    # Only the edited card (the scan reads it; the revision that records the hand edit
    # goes through the write path, which tokenizes what it writes).
    assert set(work["tokenized"]) == {"Keeps the staging database in 时区 UTC."}
    assert work["embedded"] == ["Keeps the staging database in 时区 UTC."]
    assert _found("staging") == [cards[2].id]
    assert _check()[0] == 0


def test_it_rebuilds_everything_again_with_no_cache(embeddings: None, make_card, work: dict[str, list[str]]) -> None:
    texts = [f"Prefers tool number {n} for 部署." for n in range(3)]
    for text in texts:
        save_card(make_card(content=text), actor="t")
    work["tokenized"].clear()
    work["embedded"].clear()
    _reindex("--no-cache")
    assert sorted(work["tokenized"]) == sorted(texts)
    assert sorted(work["embedded"]) == sorted(texts)


def test_it_reports_a_corrupted_terms_entry_and_no_cache_repairs_it(make_card) -> None:
    card = save_card(make_card(content="Writes backend services in Go."), actor="t")
    save_card(make_card(content="Drinks coffee black."), actor="t")
    conn = indexconn.connection()
    conn.execute("UPDATE vc.terms SET terms = 'python' WHERE hash = ?", (derived.terms_hash(card.content),))
    assert _check()[0] == 1
    assert _check()[1]["cache"] == {"missing": [], "extra": [], "changed": [card.id]}
    # A plain rebuild trusts the cache (the corrupt terms would come back); --no-cache does not.
    _reindex("--no-cache")
    code, report = _check()
    assert code == 0 and report["cache"]["changed"] == []
    assert _found("backend") == [card.id]


def test_it_reports_a_corrupted_vector_entry(embeddings: None, make_card) -> None:
    card = save_card(make_card(content="Lives in Berlin, in the Central European time zone."), actor="t")
    conn = indexconn.connection()
    garbage = np.full(embedding.DIM, np.nan, dtype=np.float16).tobytes()
    conn.execute("UPDATE vc.vectors SET vec = ? WHERE hash = ?", (garbage, embedding.content_hash(card.content)))
    code, report = _check()
    assert code == 1 and report["cache"]["changed"] == [card.id]
    _reindex("--no-cache")
    assert _check()[0] == 0


def test_erasing_a_card_leaves_none_of_its_words_in_the_cache(make_card) -> None:
    card = save_card(make_card(content="Secret project codename Bluebird."), actor="t")
    keep = save_card(make_card(content="Prefers tabs."), actor="t")
    delete_card(card, actor="t")
    rows = [terms for (terms,) in indexconn.connection().execute("SELECT terms FROM vc.terms")]
    assert rows == [derived.document_terms(keep.content)]
    assert not any("bluebird" in terms for terms in rows)


def test_it_keeps_the_cache_beside_a_machine_local_index(
    make_card, settings, tmp_path, work: dict[str, list[str]]
) -> None:
    """With MEMORY_INDEX_DIR (several machines), the cache lives with the index, never on
    the shared file root; a rebuild on this machine still reuses it."""
    local = tmp_path / "machine-local"
    shutil.rmtree(settings.MEMORY_ROOT / ".retrieval")  # the empty one the fixture made
    indexconn.reset()
    settings.MEMORY_INDEX_DIR = str(local)
    derived.close_reader()
    save_card(make_card(content="Deploys with blue-green switches."), actor="t")
    _reindex()
    work["tokenized"].clear()

    _reindex()

    assert (local / derived.CACHE_FILE).exists() and work["tokenized"] == []
    assert not (settings.MEMORY_ROOT / ".retrieval" / derived.CACHE_FILE).exists()
    assert _found("blue-green")
