"""Editing a profile never drops typed text (issue 37): every section is in one form,
Save writes the sections whose text changed as one version, and a refused save (bad
input, or a profile changed meanwhile) answers the page again with the text kept."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest
from django.test import Client

from facts.enums import SourceKind
from facts.models import AuditEvent, ProfileRevision
from facts.storage import writer
from facts.storage.cardfile import Source
from facts.storage.profilefile import Profile, Section
from facts.storage.store import Store
from facts.storage.writer import save_card

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def alice_is_known(make_card: Any) -> None:
    """Profiles are edited for people memory holds something about (issue 33): alice has a
    fact, and no profile yet (revision 0)."""
    save_card(make_card(user_id="alice"), actor="t")


def textarea(html: str, name: str) -> str:
    match = re.search(rf'<textarea name="{name}"[^>]*>(.*?)</textarea>', html, re.S)
    assert match, f"the form has a box for {name}"
    return unescape(match.group(1)).strip("\n")


def hidden(html: str, name: str) -> str:
    match = re.search(rf'<input type="hidden" name="{name}" value="([^"]*)"', html)
    assert match, name
    return match.group(1)


def someone_else_saves(user_id: str, section: str, text: str) -> None:
    def change(profile: Profile) -> Profile:
        profile.set_section(section, Section(summary=text, source=Source(kind=SourceKind.MANUAL, actor="rita")))
        return profile

    writer.commit_profile(user_id, change, actor="rita", reason="meanwhile")


def test_the_page_is_one_form_with_every_section_and_one_save(reviewer_client: Client) -> None:
    someone_else_saves("alice", "workContext", "Backend developer.")
    html = reviewer_client.get("/profiles/", {"user": "alice"}).content.decode()
    assert html.count('action="/profiles/edit/"') == 1
    assert "data-unsaved-warning" in html and "Save profile" in html
    for name in ("workContext", "topOfMind", "longTermBackground"):
        textarea(html, name)


def test_one_save_keeps_every_section_the_curator_typed_in(reviewer_client: Client, store: Store) -> None:
    response = reviewer_client.post(
        "/profiles/edit/",
        {
            "user": "alice",
            "revision": "0",
            "reason": "from the call",
            "workContext": "Backend developer, Python and Go.",
            "topOfMind": "Learning context engineering.",
            "personalContext": "",
        },
    )
    assert response.status_code == 302
    profile = store.read_profile("alice")
    assert profile.section("workContext").summary == "Backend developer, Python and Go."
    assert profile.section("topOfMind").summary == "Learning context engineering."
    assert profile.revision == 1 and ProfileRevision.objects.filter(user_id="alice").count() == 1
    events = AuditEvent.objects.filter(action="profile_edit").order_by("target")
    assert [e.target for e in events] == ["topOfMind", "workContext"]
    page = reviewer_client.get(response["Location"]).content.decode()
    assert "Saved Work context, Top of mind (profile revision 1)." in unescape(page)


def test_a_save_on_a_changed_profile_keeps_the_typed_text_and_shows_the_new_text_elsewhere(
    reviewer_client: Client, store: Store
) -> None:
    someone_else_saves("alice", "workContext", "Backend developer.")
    opened = reviewer_client.get("/profiles/", {"user": "alice"}).content.decode()
    assert hidden(opened, "revision") == "1"
    someone_else_saves("alice", "personalContext", "Lives in Lisbon.")  # revision 2, meanwhile

    mine = {"user": "alice", "reason": "mine", "workContext": "Backend developer.", "topOfMind": "Shipping."}
    response = reviewer_client.post("/profiles/edit/", {**mine, "revision": "1", "personalContext": ""})
    assert response.status_code == 409
    html = response.content.decode()
    assert "the profile changed since you opened it" in html
    assert textarea(html, "topOfMind") == "Shipping."  # what I typed, kept
    assert textarea(html, "personalContext") == "Lives in Lisbon."  # theirs, not my stale empty box
    assert hidden(html, "revision") == "2"
    assert store.read_profile("alice").section("topOfMind").summary == ""  # nothing written yet

    again = reviewer_client.post("/profiles/edit/", {**mine, "revision": "2", "personalContext": "Lives in Lisbon."})
    assert again.status_code == 302
    profile = store.read_profile("alice")
    assert profile.section("topOfMind").summary == "Shipping."
    assert profile.section("personalContext").summary == "Lives in Lisbon."


def test_a_conflict_on_the_same_section_names_it_and_keeps_my_text(reviewer_client: Client) -> None:
    someone_else_saves("alice", "topOfMind", "Their words.")
    response = reviewer_client.post("/profiles/edit/", {"user": "alice", "revision": "0", "topOfMind": "My words."})
    html = unescape(response.content.decode())
    assert response.status_code == 409 and "Changed by both of you: Top of mind" in html
    assert textarea(html, "topOfMind") == "My words."


def test_text_over_the_limit_is_refused_with_every_box_kept(reviewer_client: Client, store: Store) -> None:
    response = reviewer_client.post(
        "/profiles/edit/",
        {"user": "alice", "revision": "0", "workContext": "Keeps this.", "topOfMind": "x" * 10_001},
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert textarea(html, "workContext") == "Keeps this." and len(textarea(html, "topOfMind")) == 10_001
    assert store.read_profile("alice").revision == 0


def test_a_section_the_request_does_not_name_is_left_as_it_is(reviewer_client: Client, store: Store) -> None:
    someone_else_saves("alice", "workContext", "Backend developer.")
    reviewer_client.post("/profiles/edit/", {"user": "alice", "revision": "1", "topOfMind": "Only this."})
    profile = store.read_profile("alice")
    assert profile.section("workContext").summary == "Backend developer."
    assert profile.section("topOfMind").summary == "Only this."


def test_line_breaks_from_a_browser_do_not_count_as_a_change(reviewer_client: Client, store: Store) -> None:
    someone_else_saves("alice", "workContext", "Line one.\nLine two.")
    response = reviewer_client.post(
        "/profiles/edit/", {"user": "alice", "revision": "1", "workContext": "Line one.\r\nLine two."}, follow=True
    )
    assert "Nothing changed." in response.content.decode()
    assert store.read_profile("alice").revision == 1
