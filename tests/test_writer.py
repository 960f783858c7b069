"""The single write function: file, mirror and history move together."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from facts.models import FactCard, FactRevision, ProfileRevision, ProfileSection
from facts.storage import hooks
from facts.storage.errors import RevisionConflict
from facts.storage.profilefile import Profile, Section
from facts.storage.store import Bucket, Store
from facts.storage.writer import (
    Delete,
    DeleteProfile,
    Put,
    PutProfile,
    commit,
    commit_profile,
    delete_profile,
    save_card,
    update_card,
)

pytestmark = pytest.mark.django_db


def test_it_writes_the_file_and_the_mirror(store: Store, make_card) -> None:
    card = save_card(make_card(content="Prefers tabs."), actor="tester", reason="seed")
    row = FactCard.objects.get(id=card.id)
    assert row.content == "Prefers tabs."
    assert row.path == store.relative(store.card_path(card))
    assert store.read_card(Bucket.of(card), card.id) == card
    revision = FactRevision.objects.get(fact_id=card.id)
    assert (revision.actor, revision.reason, revision.revision) == ("tester", "seed", 1)


def test_each_update_is_a_new_revision_with_who_and_why(make_card) -> None:
    card = save_card(make_card(), actor="a")
    updated = update_card(
        Bucket.of(card), card.id, lambda c: c.model_copy(update={"content": "Changed."}), actor="b", reason="typo"
    )
    assert updated.revision == 2
    assert list(FactRevision.objects.filter(fact_id=card.id).values_list("revision", "actor")) == [(1, "a"), (2, "b")]


def test_an_update_that_changes_nothing_writes_nothing(store: Store, make_card) -> None:
    card = save_card(make_card(), actor="a")
    before = store.card_path(card).read_bytes()
    same = update_card(Bucket.of(card), card.id, lambda c: c, actor="b")
    assert same.revision == 1
    assert store.card_path(card).read_bytes() == before


def test_a_stale_revision_is_refused(make_card) -> None:
    card = save_card(make_card(), actor="a")
    update_card(Bucket.of(card), card.id, lambda c: c.model_copy(update={"content": "v2"}), actor="a")
    with pytest.raises(RevisionConflict):
        commit([Put(card.model_copy(update={"content": "lost update"}), expected_revision=1)], actor="b")


def test_a_new_card_must_not_exist_yet(make_card) -> None:
    card = save_card(make_card(), actor="a")
    with pytest.raises(RevisionConflict):
        commit([Put(card, expected_revision=None)], actor="a")


def test_delete_removes_file_and_mirror(store: Store, make_card) -> None:
    card = save_card(make_card(), actor="a")
    commit([Delete(card)], actor="a")
    assert not store.card_path(card).exists()
    assert not FactCard.objects.filter(id=card.id).exists()


def test_listeners_hear_every_committed_batch(make_card) -> None:
    heard: list[tuple[list[str], list[str]]] = []

    def listener(written, deleted) -> None:
        heard.append(([c.id for c in written], [c.id for c in deleted]))

    hooks.on_cards_changed(listener)
    try:
        a, b = make_card(), make_card()
        commit([Put(a), Put(b)], actor="x")
        commit([Delete(a)], actor="x")
    finally:
        hooks._card_listeners.remove(listener)
    assert heard == [([a.id, b.id], []), ([], [a.id])]


def test_preparers_see_a_batch_before_its_listeners(make_card) -> None:
    order: list[str] = []

    def preparer(cards) -> None:
        order.append("prepare " + ",".join(c.key for c in cards))

    def listener(written, deleted) -> None:
        order.append("changed " + ",".join(c.key for c in written))

    def failing(cards) -> None:
        raise RuntimeError("a preparer's failure never fails the write")

    hooks.on_cards_writing(failing)
    hooks.on_cards_writing(preparer)
    hooks.on_cards_changed(listener)
    try:
        commit([Put(make_card(key="a")), Put(make_card(key="b"))], actor="x")
    finally:
        hooks._card_preparers.remove(failing)
        hooks._card_preparers.remove(preparer)
        hooks._card_listeners.remove(listener)
    assert order == ["prepare a,b", "changed a,b"]


def test_profile_commits_bump_the_revision_and_mirror_every_section(store: Store) -> None:
    def set_work(profile):
        profile.set_section("workContext", Section(summary="Python backend"))
        return profile

    profile = commit_profile("alice", set_work, actor="rev", reason="edit")
    assert profile.revision == 1
    assert store.read_profile("alice").section("workContext").summary == "Python backend"
    assert ProfileSection.objects.filter(user_id="alice").count() == 7
    assert ProfileSection.objects.get(user_id="alice", name="workContext").summary == "Python backend"
    assert ProfileRevision.objects.get(user_id="alice").actor == "rev"
    with pytest.raises(RevisionConflict):
        commit_profile("alice", set_work, actor="rev", expected_revision=0)


def test_it_writes_a_profile_and_cards_in_one_commit_and_tells_listeners_of_the_cards(store: Store, make_card) -> None:
    heard: list[list[str]] = []
    hooks.on_cards_changed(lambda written, deleted: heard.append([c.key for c in written]))
    listener = hooks._card_listeners[-1]
    profile = Profile(user_id="alice")
    profile.set_section("topOfMind", Section(summary="Learning Rust"))
    try:
        result = commit(
            [Put(make_card(key="lang")), PutProfile(profile, expected_revision=0)], actor="run", reason="r1"
        )
    finally:
        hooks._card_listeners.remove(listener)
    assert [p.revision for p in result.profiles] == [1]
    assert store.read_profile("alice").section("topOfMind").summary == "Learning Rust"
    assert ProfileSection.objects.get(user_id="alice", name="topOfMind").summary == "Learning Rust"
    assert ProfileRevision.objects.get(user_id="alice").reason == "r1"
    assert FactCard.objects.filter(user_id="alice", key="lang").exists()
    assert heard == [["lang"]]


def test_it_refuses_a_batch_with_a_stale_profile_before_writing_any_file(store: Store, make_card) -> None:
    commit_profile("alice", _with_work, actor="a")
    card = make_card(key="lang")
    with pytest.raises(RevisionConflict, match="at revision 1, expected 0"):
        commit([Put(card), PutProfile(_with_work(Profile(user_id="alice")), expected_revision=0)], actor="b")
    assert not store.card_path(card).exists()
    assert not FactCard.objects.filter(id=card.id).exists()
    assert ProfileRevision.objects.filter(user_id="alice").count() == 1


def test_it_removes_a_deleted_profile_file_and_its_rows(store: Store) -> None:
    commit_profile("alice", _with_work, actor="a")
    assert delete_profile("alice", store=store)
    assert not store.profile_path("alice").exists()
    assert not ProfileSection.objects.filter(user_id="alice").exists()
    assert commit([DeleteProfile("alice")], actor="a", store=store).profiles_deleted == []


def _with_work(profile: Profile) -> Profile:
    profile.set_section("workContext", Section(summary="Python backend"))
    return profile


_WORKER = textwrap.dedent(
    """
    import os, sys
    import django
    os.environ["DJANGO_SETTINGS_MODULE"] = "memoryadmin.settings"
    django.setup()
    from facts.storage.store import Bucket
    from facts.storage.writer import update_card
    bucket = Bucket(user_id=sys.argv[1], agent_name="coder")
    for _ in range(int(sys.argv[3])):
        update_card(bucket, sys.argv[2], lambda c: c.model_copy(update={"confirmation_count": c.confirmation_count + 1}), actor="proc")
    """
)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_processes_writing_the_same_user_lose_no_update(tmp_path: Path, memory_root: Path, make_card) -> None:
    db = tmp_path / "shared.sqlite3"
    env = {"MEMORY_ROOT": str(memory_root), "DATABASE_URL": f"sqlite:///{db}", "VAR_DIR": str(tmp_path / "var")}
    import os

    full_env = {**os.environ, **env}
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=root, env=full_env, check=True)
    store = Store(memory_root)
    card = make_card(user_id="alice", agent_name="coder")
    store.write_card(card)
    procs = [
        subprocess.Popen([sys.executable, "-c", _WORKER, "alice", card.id, "40"], cwd=root, env=full_env)
        for _ in range(2)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    final = store.read_card(Bucket.of(card), card.id)
    assert final is not None
    assert final.confirmation_count == 80
    assert final.revision == 81
