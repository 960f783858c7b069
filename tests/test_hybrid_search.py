"""Hybrid search (issue 19): sentence vectors beside the FTS5 index, fused with it (issue
36: normalized BM25 plus cosine), kept in step by every write, rebuilt and checked like
the index."""

from __future__ import annotations

import contextlib
import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from facts.storage.store import Bucket, Store
from facts.storage.writer import delete_card, save_card, update_card
from retrieval import embedding, embedmany, indexconn, vectorcache
from retrieval.search import memory_search_json, search
from tests.conftest import FIXED_NOW
from tests.conftest import reindex_check as _check

pytestmark = pytest.mark.django_db


def _found(query: str, user: str = "alice") -> list[str]:
    return [hit.id for hit in search(query, user_id=user, agent_name="coder", now=FIXED_NOW)]


def _cached_hashes() -> set[str]:
    return {h for (h,) in indexconn.connection().execute("SELECT hash FROM vc.vectors")}


def test_it_finds_an_english_fact_for_a_chinese_question(embeddings: None, make_card) -> None:
    zone = save_card(make_card(content="User lives in Berlin, in the Central European time zone."), actor="t")
    save_card(make_card(content="Prefers tabs over spaces."), actor="t")
    save_card(make_card(content="Drinks coffee black."), actor="t")
    assert _found("时区")[0] == zone.id
    assert _found("time zone")[0] == zone.id


def test_without_embeddings_a_chinese_question_misses_the_english_fact(make_card) -> None:
    save_card(make_card(content="User lives in Berlin, in the Central European time zone."), actor="t")
    assert _found("时区") == []


def test_an_exact_word_still_wins_over_a_vague_neighbour(embeddings: None, make_card) -> None:
    go = save_card(make_card(content="Writes backend services in Go."), actor="t")
    save_card(make_card(content="Writes the data pipeline in Python."), actor="t")
    save_card(make_card(content="Prefers Rust for command-line tools."), actor="t")
    assert _found("Go")[0] == go.id


def test_vector_search_never_crosses_users(embeddings: None, make_card) -> None:
    save_card(make_card(user_id="bob", content="User lives in the Central European time zone."), actor="t")
    mine = save_card(make_card(content="Prefers coffee."), actor="t")
    assert "bob" not in json.dumps(memory_search_json("时区", user_id="alice", agent_name="coder"))
    assert set(_found("时区 time zone")) <= {mine.id}


def test_an_edit_re_embeds_the_card_and_drops_the_old_vector(embeddings: None, make_card) -> None:
    card = save_card(make_card(content="User deploys on Fridays."), actor="t")
    old = embedding.content_hash(card.content)
    assert old in _cached_hashes()
    update_card(Bucket.of(card), card.id, lambda c: c.model_copy(update={"content": "用户喜欢喝乌龙茶。"}), actor="t")
    assert old not in _cached_hashes()
    assert embedding.content_hash("用户喜欢喝乌龙茶。") in _cached_hashes()
    assert _found("favourite tea") == [card.id]
    assert _check()[0] == 0


def test_deleting_a_card_deletes_its_vector(embeddings: None, make_card, store: Store) -> None:
    card = save_card(make_card(content="Is allergic to peanuts."), actor="t")
    delete_card(card, actor="t")
    assert embedding.content_hash("Is allergic to peanuts.") not in _cached_hashes()
    assert _found("food allergies") == []


def test_reindex_check_reports_vector_drift_and_reindex_repairs_it(embeddings: None, make_card) -> None:
    lost = save_card(make_card(content="Keeps notes in Obsidian."), actor="t")
    stale = save_card(make_card(content="Runs 5 km every morning."), actor="t")
    save_card(make_card(content="Drinks oolong tea."), actor="t")
    conn = indexconn.connection()
    conn.execute("DELETE FROM vc.vectors WHERE hash = ?", (embedding.content_hash(lost.content),))
    conn.execute("UPDATE cards SET vhash = 'x' WHERE id = ?", (stale.id,))
    code, report = _check()
    assert code == 1
    assert report["vectors"] == {"missing": [lost.id], "extra": [], "changed": [stale.id]}
    assert report["index"] == {"missing": [], "extra": [], "changed": []}
    call_command("reindex", "--no-progress", stdout=StringIO())
    assert _check()[0] == 0
    assert _found("笔记软件")[0] == lost.id


def test_a_rebuild_embeds_only_texts_it_has_not_seen(
    embeddings: None, make_card, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(4):
        save_card(make_card(content=f"Fact number {n} about deployments."), actor="t")
    embedded: list[str] = []
    real = embedding.embed

    def counting(texts):
        embedded.extend(texts)
        return real(texts)

    monkeypatch.setattr(embedding, "embed", counting)
    call_command("reindex", "--no-progress", stdout=StringIO())
    assert embedded == []
    indexconn.connection().execute("DELETE FROM vc.vectors")  # the cache file lost
    vectorcache._recent.clear()  # and the process that wrote the cards gone
    call_command("reindex", "--no-progress", stdout=StringIO())
    assert len(embedded) == 4
    call_command("reindex", "--no-progress", "--no-cache", stdout=StringIO())
    assert len(embedded) == 8
    assert _check()[0] == 0


def test_a_first_index_embeds_on_worker_processes_while_the_mirror_is_written(
    embeddings: None, make_card, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memoryadmin import rebuild

    cards = [save_card(make_card(content=f"用户的第{n}个事实 about deployments {n}."), actor="t") for n in range(7)]
    indexconn.connection().execute("DELETE FROM vc.vectors")  # a first index: nothing cached
    vectorcache._recent.clear()
    # Few cards: let them go through the worker processes anyway, two a batch.
    monkeypatch.setattr(embedmany, "PARALLEL_MIN_TEXTS", 1)
    monkeypatch.setattr(embedmany, "PARALLEL_BATCH", 2)
    in_parent: list[str] = []
    real = embedding.embed

    def counting(texts):
        in_parent.extend(texts)  # the workers' calls happen in their own processes
        return real(texts)

    monkeypatch.setattr(embedding, "embed", counting)
    phases: list[str] = []
    counts: list[tuple[int, int]] = []
    result = rebuild.rebuild(phase=phases.append, progress=lambda done, total: counts.append((done, total)))
    assert phases == ["files", "mirror", "embedding", "index", "catch-up"]
    assert result.extra["embedded"] == 7 and counts[-1] == (7, 7)
    assert in_parent == [], "embedded in this process instead of the workers"
    assert {embedding.content_hash(card.content) for card in cards} <= _cached_hashes()
    assert _found("用户的第3个事实")[0] == cards[3].id
    assert _check()[0] == 0
    # The vectors are the batch path's, as the write path made them.
    rows = dict(indexconn.connection().execute("SELECT hash, vec FROM vc.vectors"))
    made = embedding.from_blobs([rows[embedding.content_hash(card.content)] for card in cards])
    assert float(abs(made - real([card.content for card in cards])).max()) <= 1e-3


def test_a_warm_rebuild_starts_no_worker_to_embed(embeddings: None, make_card, monkeypatch: pytest.MonkeyPatch) -> None:
    from memoryadmin import rebuild

    save_card(make_card(content="Prefers dark mode."), actor="t")
    monkeypatch.setattr(embedmany, "PARALLEL_MIN_TEXTS", 1)
    phases: list[str] = []
    rebuild.rebuild(phase=phases.append)
    assert phases == ["files", "mirror", "index", "catch-up"]


def test_turning_embeddings_on_shows_drift_until_reindex(make_card, settings) -> None:
    card = save_card(make_card(content="Prefers dark mode."), actor="t")
    assert "vectors" not in _check()[1]
    settings.MEMORY_EMBEDDINGS = True
    code, report = _check()
    assert code == 1
    assert report["vectors"]["missing"] == [card.id]
    call_command("reindex", "--no-progress", stdout=StringIO())
    assert _check()[0] == 0


def test_search_and_writes_survive_a_broken_model(embeddings: None, make_card, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(texts):
        raise embedding.EmbeddingUnavailable("model file damaged")

    monkeypatch.setattr(embedding, "embed", broken)
    monkeypatch.setattr(embedding, "embed_query", broken)
    embedding._query_vector.cache_clear()
    card = save_card(make_card(content="Uses Redis as a cache."), actor="t")
    assert _found("Redis cache") == [card.id]  # lexical answer
    code, report = _check()
    assert code == 1 and report["vectors"]["missing"] == [card.id]


def test_memory_search_json_explains_each_score(embeddings: None, make_card) -> None:
    card = save_card(make_card(content="User lives in the Central European time zone."), actor="t")
    out = StringIO()
    call_command("memory_search", "--user", "alice", "--agent", "coder", "--json", "时区", stdout=out)
    [result] = json.loads(out.getvalue())
    assert result["id"] == card.id
    explain = result["explain"]
    assert explain["lexical_rank"] is None and explain["bm25"] is None
    assert explain["vector_rank"] == 1 and explain["similarity"] > 0.2
    assert result["score"] == pytest.approx(explain["fused"] * explain["decay"] + explain["confidence_part"], abs=1e-3)
    tool = json.loads(memory_search_json("时区", user_id="alice", agent_name="coder"))
    assert "explain" not in tool[0], "the agents' tool gets no breakdown"


def test_the_playground_shows_the_vector_columns(embeddings: None, viewer_client, make_card) -> None:
    save_card(make_card(content="User lives in the Central European time zone."), actor="t")
    response = viewer_client.get("/search/", {"q": "时区", "user": "alice", "agent": "coder"})
    page = response.content.decode()
    assert "cosine" in page and "vector #" in page
    [(hit, _part)] = response.context["hits"]
    assert hit.vector_rank == 1 and hit.lexical_rank is None


def _doctor_embeddings() -> dict:
    out = StringIO()
    skips = [arg for name in ("settings", "database", "files", "index", "turns", "model") for arg in ("--skip", name)]
    with contextlib.suppress(CommandError):
        call_command("doctor", "--json", *skips, stdout=out, stderr=StringIO())
    [found] = [f for f in json.loads(out.getvalue())["findings"] if f["check"] == "embeddings"]
    return found


def test_doctor_checks_that_the_model_loads(embeddings: None, monkeypatch: pytest.MonkeyPatch) -> None:
    found = _doctor_embeddings()
    assert found["level"] == "ok" and "512 dimensions" in found["message"]

    def broken(texts):
        raise embedding.EmbeddingUnavailable("cannot load the embedding model")

    monkeypatch.setattr(embedding, "embed", broken)
    found = _doctor_embeddings()
    assert found["level"] == "fail" and "MEMORY_EMBEDDINGS=off" in found["message"]


def test_erasing_a_user_leaves_no_vector_of_their_words(embeddings: None, make_card, memory_root) -> None:
    from facts.erasure.run import erase
    from facts.erasure.scope import Scope

    secret = "Xena's passport number is kept in the blue folder."
    save_card(make_card(user_id="xena", content=secret), actor="t")
    kept = save_card(make_card(user_id="yuri", content="Yuri prefers green tea."), actor="t")
    erase(Scope.of("xena"), actor="tester")
    assert _cached_hashes() == {embedding.content_hash(kept.content)}
    raw = (memory_root / ".retrieval" / "vectors.sqlite3").read_bytes()
    assert embedding.content_hash(secret).encode() not in raw, "the scrub leaves no deleted row behind"


@pytest.mark.parametrize("query", ['"; DROP TABLE cards; --', "NEAR(a b)", "\ud800 lone surrogate", "   ", "x" * 5000])
def test_hostile_queries_get_an_answer_not_an_error(embeddings: None, make_card, query: str, caplog) -> None:
    save_card(make_card(content="Keeps notes in Obsidian."), actor="t")
    json.loads(memory_search_json(query, user_id="alice", agent_name="coder"))
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


def test_a_rebuild_that_fails_while_cards_are_embedded_stops_the_workers(
    embeddings: None, make_card, monkeypatch: pytest.MonkeyPatch
) -> None:
    from facts import mirror
    from memoryadmin import rebuild

    for n in range(3):
        save_card(make_card(content=f"Fact {n} about the failing rebuild."), actor="t")
    indexconn.connection().execute("DELETE FROM vc.vectors")
    vectorcache._recent.clear()
    monkeypatch.setattr(embedmany, "PARALLEL_MIN_TEXTS", 1)
    started: list[embedmany.Embedding] = []
    real = embedmany.Embedding.__init__

    def recording(self, *args, **kwargs):
        real(self, *args, **kwargs)
        started.append(self)

    monkeypatch.setattr(embedmany.Embedding, "__init__", recording)

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(mirror, "rebuild_mirror", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        rebuild.rebuild()
    assert len(started) == 1
    assert all(not worker.is_alive() for worker in started[0]._pool._pool)  # type: ignore[attr-defined]
