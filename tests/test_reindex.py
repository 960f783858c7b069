"""`manage.py reindex [--check]`: the mirror is rebuildable from the files."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.forms.models import model_to_dict

from facts.models import FactCard, FactRevision, ProfileSection
from facts.storage.profilefile import Section
from facts.storage.store import Store
from facts.storage.writer import commit_profile, save_card
from tests.conftest import reindex_check as _check

pytestmark = pytest.mark.django_db


def _mirror() -> list[dict]:
    return [model_to_dict(row) for row in FactCard.objects.order_by("id")]


def _seed(make_card, n: int = 5) -> list:
    cards = [save_card(make_card(user_id=f"user{i % 2}"), actor="seed") for i in range(n)]

    def profile(p):
        p.set_section("workContext", Section(summary="Python backend"))
        return p

    commit_profile("user0", profile, actor="seed")
    return cards


def test_it_rebuilds_a_deleted_mirror_exactly(make_card) -> None:
    _seed(make_card)
    before = _mirror()
    sections = list(ProfileSection.objects.order_by("name").values("user_id", "name", "summary", "file_sha256"))
    FactCard.objects.all().delete()
    ProfileSection.objects.all().delete()
    call_command("reindex", "--no-progress", stdout=StringIO())
    assert _mirror() == before
    assert list(ProfileSection.objects.order_by("name").values("user_id", "name", "summary", "file_sha256")) == sections


def test_check_reports_no_drift_when_in_step(make_card) -> None:
    _seed(make_card)
    code, report = _check()
    assert code == 0
    assert report["mirror"] == {"missing": [], "extra": [], "changed": []}


def test_check_detects_each_kind_of_drift_and_changes_nothing(store: Store, make_card) -> None:
    missing, extra, changed, *_ = _seed(make_card)
    FactCard.objects.filter(id=missing.id).delete()
    store.card_path(extra).unlink()
    path = store.card_path(changed)
    path.write_text(path.read_text().replace(changed.content, "Edited by hand."))
    snapshot = _mirror()
    code, report = _check()
    assert code == 1
    assert report["mirror"]["missing"] == [missing.id]
    assert report["mirror"]["extra"] == [extra.id]
    assert report["mirror"]["changed"] == [changed.id]
    assert _mirror() == snapshot, "--check must not change the mirror"


def test_check_detects_a_hand_edited_profile(store: Store, make_card) -> None:
    _seed(make_card)
    path = store.profile_path("user0")
    path.write_text(path.read_text().replace("Python backend", "Go backend"))
    code, report = _check()
    assert code == 1
    assert report["mirror"]["changed"] == ["profile:user0"]


def test_a_hand_edited_card_shows_up_after_reindex(store: Store, make_card) -> None:
    card = save_card(make_card(content="Prefers spaces."), actor="seed")
    path = store.card_path(card)
    path.write_text(
        path.read_text()
        .replace("Prefers spaces.", "Prefers tabs, edited by hand.")
        .replace("confidence: 0.9", "confidence: 0.75")
    )
    call_command("reindex", "--no-progress", stdout=StringIO())
    row = FactCard.objects.get(id=card.id)
    assert (row.content, row.confidence) == ("Prefers tabs, edited by hand.", 0.75)
    assert FactRevision.objects.filter(fact_id=card.id, actor="reindex").exists()
    assert _check()[0] == 0


def test_a_broken_card_is_reported_and_skipped(store: Store, make_card) -> None:
    good = save_card(make_card(), actor="seed")
    broken = save_card(make_card(), actor="seed")
    path = store.card_path(broken)
    path.write_text("---\nid: [oops\n---\nnot yaml\n")
    err = StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("reindex", "--no-progress", stdout=StringIO(), stderr=err)
    assert failed.value.returncode == 2, "the rest is rebuilt, but the broken card is not silent"
    assert str(store.relative(path)) in err.getvalue()
    assert FactCard.objects.filter(id=good.id).exists()
    assert not FactCard.objects.filter(id=broken.id).exists()


def test_a_card_moved_to_the_wrong_folder_is_reported(store: Store, make_card) -> None:
    card = save_card(make_card(user_id="alice"), actor="seed")
    path = store.card_path(card)
    text = path.read_text().replace("user_id: alice", "user_id: mallory")
    path.write_text(text)
    code, report = _check()
    assert code == 2, "an unreadable (misplaced) card outranks the drift it causes"
    assert any("folder" in item["error"] for item in report["unreadable"])
