"""The dashboard never shows where the server keeps its files: memory files are named
by their place under MEMORY_ROOT, also inside error texts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from facts.models import ExtractionRun
from facts.storage.store import Bucket, Store
from facts.storage.writer import save_card
from memoryadmin.models import DriftCheck
from retrieval.models import IndexRebuild

from .test_dashboard_facts import scope_of

pytestmark = pytest.mark.django_db


def test_the_fact_page_names_its_file_relative_to_the_memory_root(
    viewer_client: Client, make_card: Any, store: Store, memory_root: Path
) -> None:
    card = save_card(make_card(), actor="t")
    page = viewer_client.get(f"/facts/{card.id}/").content.decode()
    relative = store.card_path(card).relative_to(memory_root).as_posix()
    assert relative in page
    assert str(memory_root) not in page


def test_error_texts_name_files_relative_to_the_memory_root(
    reviewer_client: Client, make_card: Any, store: Store, memory_root: Path
) -> None:
    card = save_card(make_card(), actor="t")
    absolute = store.card_path(card)
    relative = absolute.relative_to(memory_root).as_posix()
    ExtractionRun.objects.create(user_id="alice", agent_name="coder", status="failed", error=f"cannot read {absolute}")
    DriftCheck.objects.create(status="failed", error=f"OSError: [Errno 13] Permission denied: '{absolute}'")
    rebuild = IndexRebuild.objects.create(status="failed", error=f"{absolute}: front matter is not YAML")
    pages = {
        "overview": reviewer_client.get("/").content.decode(),
        "index": reviewer_client.get("/index/").content.decode(),
        "rebuild": reviewer_client.get(f"/index/rebuild/{rebuild.pk}/").content.decode(),
    }
    # a card whose file a person broke by hand: the correction's error names the file
    absolute.write_text("---\nid: [unclosed\n---\nbroken\n", encoding="utf-8")
    reviewer_client.post(
        f"/facts/{card.id}/correct/",
        {"scope": scope_of(card), "content": "x", "key": card.key, "category": "preference", "confidence": "0.8",
         "reason": "r", "revision": "1"},
    )  # fmt: skip
    pages["flash message"] = reviewer_client.get(f"/facts/{card.id}/").content.decode()
    assert "Nothing was changed" in pages["flash message"]
    for name, body in pages.items():
        assert relative in body, name
        assert str(memory_root) not in body, name


def test_every_page_is_free_of_the_memory_root(admin_client_: Client, make_card: Any, memory_root: Path) -> None:
    card = save_card(make_card(), actor="t")
    save_card(make_card(user_id=None, agent_name=None, project_id="apollo"), actor="t")
    assert Store(memory_root).read_card(Bucket.of(card), card.id) is not None
    urls = [
        "/", "/review/", "/facts/", f"/facts/{card.id}/", "/conflicts/", "/profiles/", "/profiles/?user=alice",
        "/preview/?user=alice&agent=coder&mode=auto", "/search/?user=alice&agent=coder&q=fact", "/index/",
        "/audit/", "/agents/",
    ]  # fmt: skip
    for url in urls:
        response = admin_client_.get(url)
        assert response.status_code == 200, url
        assert str(memory_root) not in response.content.decode(), url
