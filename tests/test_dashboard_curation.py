"""The curators' rough edges (issue 21): the context preview's links and wording, the
review queue's states, bulk selection, legend and undo, profile revert, confirmations,
times with their zone, the fact page's heading and path, the favicon."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from facts.models import AuditEvent, Candidate, FactCard, ProfileRevision
from facts.storage.profilefile import Section
from facts.storage.writer import commit_profile, save_card

pytestmark = pytest.mark.django_db

# --- context preview ----------------------------------------------------------------------


def test_it_previews_the_agents_busiest_user_from_the_agents_page_link(admin_client_: Client, make_card) -> None:
    save_card(make_card(user_id="bob", content="Bob likes tea."), actor="t")
    for n in range(2):
        save_card(make_card(user_id="alice", content=f"Alice fact {n}."), actor="t")
    body = admin_client_.get("/agents/").content.decode()
    link = re.search(r'href="(/preview/\?agent=coder)"', body)
    assert link, "the agents page links to the preview of each agent"
    response = admin_client_.get(link.group(1).replace("&amp;", "&"))
    assert response.context["form"].cleaned_data["user"] == "alice"
    assert "Alice fact 0." in response.content.decode()
    assert "the user with the most facts for this agent" in response.content.decode()
    assert b"This field is required" not in response.content


def test_it_previews_the_users_main_agent_from_a_profile_link_without_an_error(
    viewer_client: Client, make_card
) -> None:
    save_card(make_card(agent_name="writer", content="Writes in French."), actor="t")
    response = viewer_client.get("/preview/", {"user": "alice"})
    text = response.content.decode()
    assert "This field is required" not in text
    assert response.context["form"].cleaned_data["agent"] == "writer"
    assert "Writes in French." in text


def test_it_shows_a_blank_form_without_errors_when_nothing_can_be_picked(viewer_client: Client) -> None:
    response = viewer_client.get("/preview/", {"agent": "nobody-uses-me"})
    assert b"This field is required" not in response.content
    assert b'value="nobody-uses-me"' in response.content
    assert "rendered" not in response.context


def test_it_still_reports_a_field_the_curator_emptied(viewer_client: Client) -> None:
    response = viewer_client.get("/preview/", {"user": "alice", "agent": ""})
    assert b"This field is required" in response.content


def test_it_words_left_out_facts_once_and_lists_no_phantom_included_fact(viewer_client: Client, make_card) -> None:
    save_card(make_card(content="A fact " + "with many words " * 30), actor="t")
    response = viewer_client.get("/preview/", {"user": "alice", "agent": "coder", "budget": 40})  # type: ignore[arg-type]
    text = response.content.decode()
    assert "over the total token budget" in text
    assert "budget did not fit in the budget" not in text and "expired expired" not in text
    assert '<li class="muted">none</li>' not in text
    assert "No facts were included." in text


def test_it_explains_why_a_correction_is_cut_by_the_total_budget(viewer_client: Client, make_card, store) -> None:
    from facts.storage.profilefile import Section
    from facts.storage.writer import commit_profile

    def fill(profile):
        profile.set_section("workContext", Section(summary="Works on compilers " * 20))
        return profile

    commit_profile("alice", fill, actor="t", reason="seed")
    save_card(
        make_card(category="correction", content="Her name is spelled Alicia, not Alice. " + "Alicia always. " * 30),
        actor="t",
    )
    response = viewer_client.get(
        "/preview/",
        {"user": "alice", "agent": "coder", "budget": 200, "correction_budget": 190},  # type: ignore[arg-type]
    )
    text = response.content.decode()
    room = response.context["correction_room"]
    assert room < 190
    assert f"leaving {room} tokens for corrections" in text
    assert "is a cap inside the total" in text
    assert "Work context" in text  # the section's label, not its key


# --- review queue ---------------------------------------------------------------------------


def live(make_candidate, **kw):
    return make_candidate(verdict=Candidate.Verdict.ACCEPTED, reasons=[], review_state=Candidate.ReviewState.NONE, **kw)


def test_it_offers_no_approve_on_a_candidate_the_gate_already_wrote(reviewer_client: Client, make_candidate) -> None:
    written = live(make_candidate, content="Live already.", fact_id="f_live")
    waiting = make_candidate(content="Waiting one.")
    body = reviewer_client.get("/review/", {"state": "all"}).content.decode()
    row = re.search(rf'<tr id="candidate-{written.pk}".*?</tr>', body, re.S).group(0)
    assert "Approve" not in row and "Dismiss" not in row and 'name="ids"' not in row
    assert "written by the gate" in row
    other = re.search(rf'<tr id="candidate-{waiting.pk}".*?</tr>', body, re.S).group(0)
    assert "Approve" in other and 'name="ids"' in other


def test_it_says_the_gate_wrote_it_when_approving_a_live_candidate(reviewer_client: Client, make_candidate) -> None:
    written = live(make_candidate)
    response = reviewer_client.post(f"/review/{written.pk}/approve/", {"note": "sure"}, follow=True)
    text = response.content.decode()
    assert "already reviewed" not in text and "Not reviewed" not in text
    assert "The gate accepted this candidate and wrote it already" in text
    assert "written by the gate" in text


def test_it_approves_only_the_selected_rows(reviewer_client: Client, make_candidate) -> None:
    a, b, c = (make_candidate(content=f"Candidate {n}.", key=f"k{n}") for n in "abc")
    response = reviewer_client.post(
        "/review/selected/", {"ids": [a.pk, c.pk], "action": "approve", "note": "both are right"}, follow=True
    )
    assert "Approved 2 selected candidate(s)." in response.content.decode()
    states = {x.pk: x.review_state for x in Candidate.objects.all()}
    assert states == {a.pk: "approved", b.pk: "pending", c.pk: "approved"}
    assert FactCard.objects.filter(content__in=["Candidate a.", "Candidate c."]).count() == 2


def test_it_refuses_to_approve_the_selection_without_a_reason(reviewer_client: Client, make_candidate) -> None:
    a = make_candidate()
    response = reviewer_client.post("/review/selected/", {"ids": [a.pk], "action": "approve"}, follow=True)
    assert "write why" in response.content.decode()
    a.refresh_from_db()
    assert a.review_state == "pending"


def test_it_skips_selected_rows_that_are_no_longer_open(reviewer_client: Client, make_candidate) -> None:
    open_one = make_candidate()
    gone = make_candidate(review_state=Candidate.ReviewState.DISMISSED)
    written = live(make_candidate)
    response = reviewer_client.post(
        "/review/selected/", {"ids": [open_one.pk, gone.pk, written.pk], "action": "dismiss"}, follow=True
    )
    assert "Dismissed 1 selected candidate(s); 2 were no longer open." in response.content.decode()
    written.refresh_from_db()
    assert written.review_state == "none"


def test_a_viewer_cannot_act_on_selected_rows_or_undo(viewer_client: Client, make_candidate) -> None:
    a = make_candidate(review_state=Candidate.ReviewState.DISMISSED)
    assert viewer_client.post("/review/selected/", {"ids": [a.pk], "action": "dismiss"}).status_code == 403
    assert viewer_client.post("/review/restore/", {"ids": [a.pk]}).status_code == 403


def test_it_undoes_a_dismissal_from_the_flash_message_and_audits_it(reviewer_client: Client, make_candidate) -> None:
    a = make_candidate(content="Dismissed by mistake.")
    response = reviewer_client.post(f"/review/{a.pk}/dismiss/", {"next": "/review/"}, follow=True)
    text = response.content.decode()
    assert "Dismissed." in text and 'action="/review/restore/"' in text and "Undo" in text
    assert "Dismissed by mistake." not in text  # out of the open queue
    response = reviewer_client.post("/review/restore/", {"ids": [a.pk], "next": "/review/"}, follow=True)
    assert "Dismissal undone: 1 candidate(s) wait for review again." in response.content.decode()
    assert "Dismissed by mistake." in response.content.decode()
    a.refresh_from_db()
    assert a.review_state == "pending" and a.reviewed_by is None
    restore = AuditEvent.objects.get(action=AuditEvent.Action.RESTORE)
    assert restore.target == f"candidate:{a.pk}" and restore.actor == "reviewer"


def test_it_undoes_a_rejected_candidates_dismissal_back_to_unreviewed(reviewer_client: Client, make_candidate) -> None:
    a = make_candidate(review_state=Candidate.ReviewState.NONE)
    reviewer_client.post(f"/review/{a.pk}/dismiss/")
    reviewer_client.post("/review/restore/", {"ids": [a.pk]})
    a.refresh_from_db()
    assert a.review_state == "none"
    assert (
        reviewer_client.post("/review/restore/", {"ids": [a.pk]}, follow=True)
        .content.decode()
        .count("1 were no longer dismissed")
    )


def test_an_htmx_dismiss_answers_with_a_row_offering_undo(reviewer_client: Client, make_candidate) -> None:
    a = make_candidate()
    row = reviewer_client.post(f"/review/{a.pk}/dismiss/", headers={"HX-Request": "true"}).content.decode()
    assert "Undo dismiss" in row
    back = reviewer_client.post(
        "/review/restore/", {"ids": [a.pk]}, headers={"HX-Request": "true", "HX-Target": f"candidate-{a.pk}"}
    ).content.decode()
    assert back.lstrip().startswith("<tr") and "Approve" in back
    # The rows said it all: no stale "Dismissed." or "undone" waits for the next full page.
    page = reviewer_client.get("/review/").content.decode()
    assert "Dismissed." not in page and "Dismissal undone" not in page


def test_it_undoes_a_dismissal_of_selected_rows(reviewer_client: Client, make_candidate) -> None:
    a, b = make_candidate(), make_candidate()
    text = reviewer_client.post(
        "/review/selected/", {"ids": [a.pk, b.pk], "action": "dismiss"}, follow=True
    ).content.decode()
    assert text.count('name="ids" value=') >= 2 and "Undo" in text
    reviewer_client.post("/review/restore/", {"ids": [a.pk, b.pk]})
    assert set(Candidate.objects.values_list("review_state", flat=True)) == {"pending"}


def test_the_queue_explains_every_reason_code_and_lists_the_keys(viewer_client: Client, make_candidate) -> None:
    from facts.judging.gate import REASON_CODES

    make_candidate(reasons=["low_confidence"])
    text = viewer_client.get("/review/").content.decode()
    assert "What the reason codes mean" in text
    for code in REASON_CODES:
        assert f'<span class="badge reason">{code}</span>' in text
    assert 'title="The model&#x27;s confidence is under the threshold' in text
    assert "/static/js/review-keys.js" in text and 'id="keys-help"' in text


# --- profile versions, labels, revert ---------------------------------------------------------


def set_work(text: str, reason: str = "edit") -> None:
    def change(profile):
        profile.set_section("workContext", Section(summary=text))
        return profile

    commit_profile("alice", change, actor="t", reason=reason)


def test_it_labels_profile_sections_for_people(viewer_client: Client) -> None:
    set_work("Builds compilers.")
    text = viewer_client.get("/profiles/", {"user": "alice"}).content.decode()
    assert '<h3 title="workContext">Work context</h3>' in text
    assert "Top of mind" in text and "Long-term background" in text


def test_it_reverts_a_profile_after_a_confirm_step_showing_the_diff(reviewer_client: Client) -> None:
    set_work("Builds compilers.", "first")
    set_work("Sells boats.", "second")
    current = ProfileRevision.objects.filter(user_id="alice").order_by("-revision").first().revision
    first = current - 1
    form = {"user": "alice", "revision": first, "current": current, "reason": "the boat line was a mistake"}
    asked = reviewer_client.post("/profiles/revert/", form)
    text = asked.content.decode()
    assert "Revert alice&#x27;s profile to version" in text and "Work context" in text
    assert "-Sells boats." in text and "+Builds compilers." in text
    assert 'name="confirmed" value="yes"' in text
    assert ProfileRevision.objects.filter(user_id="alice").count() == current  # nothing written yet
    done = reviewer_client.post("/profiles/revert/", {**form, "confirmed": "yes"}, follow=True)
    assert f"Reverted to version {first}" in done.content.decode()
    latest = ProfileRevision.objects.filter(user_id="alice").order_by("-revision").first()
    assert latest.revision == current + 1 and latest.document["user"]["workContext"]["summary"] == "Builds compilers."
    event = AuditEvent.objects.get(action=AuditEvent.Action.REVERT)
    assert event.target == "profile:alice" and event.reason == "the boat line was a mistake"
    assert event.details["to_revision"] == first


def test_it_refuses_a_revert_of_a_profile_that_changed_meanwhile(reviewer_client: Client) -> None:
    set_work("One.")
    set_work("Two.")
    current = ProfileRevision.objects.filter(user_id="alice").order_by("-revision").first().revision
    set_work("Three.")
    form = {"user": "alice", "revision": current - 1, "current": current, "confirmed": "yes"}
    text = reviewer_client.post("/profiles/revert/", form, follow=True).content.decode()
    assert "Not reverted: the profile changed" in text
    assert (
        ProfileRevision.objects.filter(user_id="alice")
        .order_by("-revision")
        .first()
        .document["user"]["workContext"]["summary"]
        == "Three."
    )


def test_a_viewer_cannot_revert_a_profile(viewer_client: Client) -> None:
    set_work("One.")
    form = {"user": "alice", "revision": 1, "current": 1, "confirmed": "yes"}
    assert viewer_client.post("/profiles/revert/", form).status_code == 403


# --- confirmations ----------------------------------------------------------------------------


def test_revoking_a_key_asks_first_and_works_without_javascript(admin_client_: Client) -> None:
    from memoryadmin.models import ApiKey

    admin_client_.post("/agents/keys/", {"name": "ci"})
    key = ApiKey.objects.get(name="ci")
    page = admin_client_.get("/agents/").content.decode()
    assert "data-confirm=" in page and "/static/js/confirm.js" in page
    asked = admin_client_.post(f"/agents/keys/{key.pk}/revoke/").content.decode()
    assert "Revoke the key ci" in asked and 'name="confirmed" value="yes"' in asked
    key.refresh_from_db()
    assert key.active
    admin_client_.post(f"/agents/keys/{key.pk}/revoke/", {"confirmed": "yes"})
    key.refresh_from_db()
    assert not key.active


def test_keep_this_one_asks_first(reviewer_client: Client, make_card) -> None:
    a = save_card(make_card(key="city", content="Lives in Paris."), actor="t")
    b = save_card(make_card(key="city", content="Lives in Lyon."), actor="t")
    asked = reviewer_client.post("/conflicts/resolve/", {"keep": b.id, "others": a.id}).content.decode()
    assert "Keep “Lives in Lyon.” and supersede the 1 other card(s)?" in asked
    assert FactCard.objects.get(id=a.id).status == "active"


# --- times, the fact page, the favicon --------------------------------------------------------


def test_every_page_says_its_time_zone(viewer_client: Client, settings) -> None:
    settings.TIME_ZONE = "Europe/Paris"
    text = viewer_client.get("/review/").content.decode()
    assert "Times are in Europe/Paris" in text


def test_the_fact_page_is_headed_by_its_text_and_shows_no_absolute_path(
    viewer_client: Client, make_card, memory_root
) -> None:
    card = save_card(make_card(key="favourite_tea", content="Drinks green tea."), actor="t")
    text = viewer_client.get(f"/facts/{card.id}/").content.decode()
    assert re.search(r'<h1 class="fact-heading">Drinks green tea\.', text)
    assert str(memory_root) not in text
    assert "favourite_tea" in text


def test_the_favicon_is_served_and_linked(client: Client) -> None:
    response = client.get("/favicon.ico")
    assert response.status_code == 200 and response["Content-Type"] == "image/x-icon"
    assert b"".join(response.streaming_content)[:4] == b"\x00\x00\x01\x00"  # type: ignore[attr-defined]
    assert b'rel="icon"' in client.get("/login/").content


def test_reverting_a_fact_asks_first_with_the_diff(reviewer_client: Client, make_card) -> None:
    card = save_card(make_card(content="Version one."), actor="t")
    scope = f"{card.user_id} × {card.agent_name}"
    reviewer_client.post(
        f"/facts/{card.id}/correct/",
        {
            "scope": scope,
            "content": "Version two.",
            "key": card.key,
            "category": "preference",
            "confidence": "0.8",
            "reason": "x",
        },
    )
    assert FactCard.objects.get(id=card.id).content == "Version two."
    asked = reviewer_client.post(f"/facts/{card.id}/revert/1/", {"scope": scope}).content.decode()
    assert "to revision 1?" in asked and "-Version two." in asked and "+Version one." in asked
    assert FactCard.objects.get(id=card.id).content == "Version two."
    reviewer_client.post(f"/facts/{card.id}/revert/1/", {"scope": scope, "confirmed": "yes"})
    assert FactCard.objects.get(id=card.id).content == "Version one."


def test_a_dismissed_candidates_page_offers_undo(reviewer_client: Client, make_candidate) -> None:
    a = make_candidate()
    reviewer_client.post(f"/review/{a.pk}/dismiss/")
    page = reviewer_client.get(f"/review/{a.pk}/").content.decode()
    assert "Undo the dismissal" in page
    after = reviewer_client.post(
        "/review/restore/", {"ids": [a.pk], "next": f"/review/{a.pk}/"}, follow=True
    ).content.decode()
    assert "Undo the dismissal" not in after and "Approve (or correct and approve)" in after
