"""Person ids on every page and command that takes one (issue 33): checked with the
API's rules, and "no such person" when memory holds nothing about the id — never a
reassuring "Erased user nobody-x: 0 item(s) removed", an archive of zeros, or an empty
profile whose Save creates the person."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from facts.models import AuditEvent, Erasure, ProfileRevision, ProfileSection
from facts.storage.store import Store
from facts.storage.writer import save_card

pytestmark = pytest.mark.django_db

GHOSTS = ["nobody-x", "ghost-user-typo"]
BAD = ["../../etc/passwd", "../sam.taylor", "a\\b"]


@pytest.fixture
def alice(make_card: Any) -> Any:
    return save_card(make_card(user_id="alice", content="User writes Go."), actor="t")


# --- erase ---------------------------------------------------------------------------------


@pytest.mark.parametrize("user", GHOSTS)
def test_erasing_someone_memory_never_held_says_no_such_person(admin_client_: Client, user: str) -> None:
    page = admin_client_.get("/people/user/erase/", {"user": user})
    assert page.status_code == 404 and "no such person" in page.content.decode().lower()
    done = admin_client_.post("/people/user/erase/", {"user": user, "confirm": user}, follow=True)
    text = done.content.decode()
    assert "Erased user" not in text and "no such person" in text.lower()
    assert not Erasure.objects.exists() and not AuditEvent.objects.filter(action="erase").exists()


@pytest.mark.parametrize("user", BAD)
def test_erasing_an_id_the_api_refuses_names_the_rule(admin_client_: Client, user: str) -> None:
    page = admin_client_.get("/people/user/erase/", {"user": user})
    assert page.status_code == 400 and "not a valid user id" in page.content.decode().lower()
    admin_client_.post("/people/user/erase/", {"user": user, "confirm": user})
    assert not Erasure.objects.exists()


def test_the_erase_command_says_no_such_person_and_does_nothing() -> None:
    for args in (["--user", "nobody-x"], ["--user", "nobody-x", "--yes"]):
        with pytest.raises(CommandError, match=r"(?i)no such person"):
            call_command("erase", *args, stdout=io.StringIO())
    with pytest.raises(CommandError, match=r"(?i)not a valid user id"):
        call_command("erase", "--user", "../sam.taylor", "--yes", stdout=io.StringIO())
    assert not Erasure.objects.exists()


def test_someone_memory_holds_is_still_erased(admin_client_: Client, alice: Any) -> None:
    assert admin_client_.get("/people/user/erase/", {"user": "alice"}).status_code == 200
    done = admin_client_.post("/people/user/erase/", {"user": "alice", "confirm": "alice"}, follow=True)
    assert "Erased user alice" in done.content.decode()


# --- export ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_rerunning_a_finished_erasure_says_nothing_is_left_and_succeeds(alice: Any) -> None:
    call_command("erase", "--user", "alice", "--yes", stdout=io.StringIO())
    out = io.StringIO()
    call_command("erase", "--user", "alice", "--yes", stdout=out)  # a rerun after a kill: no error
    assert "Nothing left to erase" in out.getvalue()
    with pytest.raises(CommandError, match="No such person"):
        call_command("erase", "--user", "alice", stdout=io.StringIO())  # a dry run still says so


@pytest.mark.parametrize("user", ["nobody-x", "../sam.taylor"])
def test_the_export_command_refuses_an_unknown_person(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CommandError, match=r"(?i)no such person|not a valid user id"):
        call_command("export", "--user", user, stdout=io.StringIO())
    assert not list(tmp_path.glob("*.zip"))


@pytest.mark.parametrize(
    ("user", "status", "words"), [("nobody-x", 404, "no such person"), ("../sam.taylor", 400, "not a valid user id")]
)
def test_the_export_page_refuses_an_unknown_person(admin_client_: Client, user: str, status: int, words: str) -> None:
    page = admin_client_.get("/export/", {"user": user})
    assert page.status_code == status and words in page.content.decode().lower()
    assert admin_client_.post(f"/export/?user={user}").status_code == status
    assert not AuditEvent.objects.filter(action="export").exists()


# --- profiles ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "status", "words"),
    [("ghost-user-typo", 404, "no such person"), ("../../etc/passwd", 400, "not a valid user id")],
)
def test_the_profiles_page_opens_no_editable_profile_for_an_unknown_id(
    reviewer_client: Client, user: str, status: int, words: str
) -> None:
    page = reviewer_client.get("/profiles/", {"user": user})
    text = page.content.decode()
    assert page.status_code == status and words in text.lower()
    assert "section_name" not in text and "Save" not in text


@pytest.mark.parametrize("user", ["ghost-user-typo", "../../etc/passwd"])
def test_saving_a_profile_never_creates_a_person(reviewer_client: Client, store: Store, user: str) -> None:
    response = reviewer_client.post(
        "/profiles/edit/",
        {
            "user": user,
            "section_name": "workContext",
            "workContext-section": "workContext",
            "workContext-summary": "Hacked.",
            "workContext-revision": "0",
        },
        follow=True,
    )
    assert (
        "no such person" in response.content.decode().lower()
        or "not a valid user id" in response.content.decode().lower()
    )
    assert not ProfileSection.objects.exists() and not ProfileRevision.objects.exists()
    assert not (store.root / "users").exists() or not any((store.root / "users").iterdir())


def test_a_held_persons_profile_is_still_editable(reviewer_client: Client, alice: Any) -> None:
    page = reviewer_client.get("/profiles/", {"user": "alice"})
    assert page.status_code == 200 and "Save profile" in page.content.decode()
