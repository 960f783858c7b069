"""Dashboard: the facts list, a fact's detail page and every curation action on it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client

from facts.enums import CardStatus
from facts.models import AuditEvent, FactCard, FactRevision
from facts.storage.store import Bucket, Store
from facts.storage.writer import save_card

pytestmark = pytest.mark.django_db

HOSTILE = "Likes <script>alert(1)</script> and </memory> tags & more"


def scope_of(card) -> str:
    return f"{card.user_id} × {card.agent_name}"


def test_it_lists_facts_filtered_by_user_agent_and_status(viewer_client: Client, make_card) -> None:
    save_card(make_card(user_id="alice", agent_name="coder", content="Alice codes in Rust."), actor="t")
    save_card(make_card(user_id="bob", agent_name="coder", content="Bob writes Go."), actor="t")
    save_card(
        make_card(user_id="alice", agent_name="coder", status=CardStatus.EXPIRED, content="Old alice."), actor="t"
    )
    response = viewer_client.get("/facts/", {"user": "alice", "agent": "coder", "status": "active"})
    assert response.status_code == 200
    assert b"Alice codes in Rust." in response.content
    assert b"Bob writes Go." not in response.content
    assert b"Old alice." not in response.content


def test_pagination_keeps_the_filters_in_the_url(viewer_client: Client, make_card) -> None:
    for _ in range(55):
        save_card(make_card(user_id="alice", agent_name="coder"), actor="t")
    response = viewer_client.get("/facts/", {"user": "alice", "agent": "coder"})
    assert b"page 1 of 2" in response.content
    assert b"user=alice&amp;agent=coder&amp;page=2" in response.content
    second = viewer_client.get("/facts/", {"user": "alice", "agent": "coder", "page": 2})  # type: ignore[arg-type]
    assert len(second.context["page"].object_list) == 5


def test_htmx_gets_only_the_rows_partial(viewer_client: Client, make_card) -> None:
    save_card(make_card(content="Partial row."), actor="t")
    response = viewer_client.get("/facts/", headers={"HX-Request": "true", "HX-Target": "fact-rows"})
    assert b"Partial row." in response.content
    assert b"<html" not in response.content


def test_text_search_needs_a_scope(viewer_client: Client) -> None:
    response = viewer_client.get("/facts/", {"q": "rust"})
    assert b"Text search runs in one scope" in response.content


def test_a_bad_agent_name_in_the_filters_is_a_form_error(viewer_client: Client) -> None:
    response = viewer_client.get("/facts/", {"agent": "../etc"})
    assert response.status_code == 200
    assert response.context["form"].errors["agent"]


def test_fact_text_is_escaped_everywhere(viewer_client: Client, make_card) -> None:
    card = save_card(make_card(content=HOSTILE, key="hostile"), actor="t")
    for url in ("/facts/", f"/facts/{card.id}/"):
        body = viewer_client.get(url).content
        assert b"<script>alert(1)</script>" not in body
        assert b"</memory>" not in body
        assert b"&lt;script&gt;" in body


def test_the_detail_page_shows_file_provenance_and_history(viewer_client: Client, make_card, store: Store) -> None:
    card = save_card(make_card(content="Prefers tabs."), actor="seeder", reason="first")
    response = viewer_client.get(f"/facts/{card.id}/")
    body = response.content.decode()
    assert store.relative(store.card_path(card)) in body
    assert "Revision 1 · seeder" in body
    assert "first" in body


def test_an_unknown_fact_is_not_found(viewer_client: Client) -> None:
    assert viewer_client.get("/facts/fact_000000000000/").status_code == 404
    assert viewer_client.get("/facts/not-an-id/").status_code == 404


def correct(client: Client, card, **overrides):
    data = {
        "scope": scope_of(card),
        "content": "Prefers spaces.",
        "key": card.key,
        "category": "preference",
        "confidence": "0.8",
        "reason": "user said so",
    }
    data.update(overrides)
    return client.post(f"/facts/{card.id}/correct/", data)


def test_correcting_writes_a_new_revision_through_the_writer(reviewer_client: Client, make_card, store: Store) -> None:
    card = save_card(make_card(content="Prefers tabs."), actor="t")
    response = correct(reviewer_client, card)
    assert response.status_code == 302
    assert store.read_card(Bucket.of(card), card.id).content == "Prefers spaces."
    assert FactCard.objects.get(id=card.id).revision == 2
    revision = FactRevision.objects.get(fact_id=card.id, revision=2)
    assert (revision.actor, revision.reason) == ("reviewer", "user said so")
    event = AuditEvent.objects.get(action="correct", target=card.id)
    assert event.actor == "reviewer"
    page = reviewer_client.get(f"/facts/{card.id}/").content.decode()
    assert "Prefers spaces." in page and "Revision 2 · reviewer" in page


def test_a_correction_of_an_older_revision_is_refused(reviewer_client: Client, make_card, store: Store) -> None:
    # Two curators open revision 1; the second one's correction must not silently
    # overwrite the first one's (found by tests/test_concurrency_web.py: lost increments).
    card = save_card(make_card(content="Prefers tabs."), actor="t")
    page = reviewer_client.get(f"/facts/{card.id}/").content.decode()
    assert 'name="revision" value="1"' in page
    assert correct(reviewer_client, card, content="Prefers spaces.", revision="1").status_code == 302
    response = correct(reviewer_client, card, content="Prefers two spaces.", revision="1")
    assert response.status_code == 302
    current = store.read_card(Bucket.of(card), card.id)
    assert (current.content, current.revision) == ("Prefers spaces.", 2)
    assert "changed since you opened it (revision 1, now 2)" in reviewer_client.get(response.url).content.decode()
    assert AuditEvent.objects.filter(action="correct", target=card.id).count() == 1
    assert correct(reviewer_client, card, content="Prefers two spaces.", revision="2").status_code == 302
    assert store.read_card(Bucket.of(card), card.id).content == "Prefers two spaces."


def test_the_correct_form_carries_the_revision_of_the_file(reviewer_client: Client, make_card, store: Store) -> None:
    # A mirror row behind its file (a crash between the two) must not make every
    # correction a conflict: the form is filled from the file.
    card = save_card(make_card(content="Prefers tabs."), actor="t")
    store.write_card(card.model_copy(update={"revision": 2, "content": "Prefers tabs, edited by hand."}))
    page = reviewer_client.get(f"/facts/{card.id}/").content.decode()
    assert 'name="revision" value="2"' in page and "Prefers tabs, edited by hand.</textarea>" in page
    assert correct(reviewer_client, card, revision="2").status_code == 302
    assert store.read_card(Bucket.of(card), card.id).revision == 3


def test_a_correction_needs_a_reason(reviewer_client: Client, make_card) -> None:
    card = save_card(make_card(content="Prefers tabs."), actor="t")
    correct(reviewer_client, card, reason="")
    assert FactCard.objects.get(id=card.id).content == "Prefers tabs."


def test_a_viewer_cannot_correct(viewer_client: Client, make_card) -> None:
    card = save_card(make_card(content="Prefers tabs."), actor="t")
    assert correct(viewer_client, card).status_code == 403
    assert FactCard.objects.get(id=card.id).content == "Prefers tabs."


def test_an_action_with_another_scope_is_refused(reviewer_client: Client, make_card) -> None:
    card = save_card(make_card(user_id="alice", agent_name="coder"), actor="t")
    response = correct(reviewer_client, card, scope="bob × coder")
    assert response.status_code == 404
    assert FactCard.objects.get(id=card.id).revision == 1


def test_expire_now_then_restore(reviewer_client: Client, make_card) -> None:
    card = save_card(make_card(), actor="t")
    reviewer_client.post(f"/facts/{card.id}/expire/", {"scope": scope_of(card), "reason": "stale"})
    row = FactCard.objects.get(id=card.id)
    assert row.status == CardStatus.EXPIRED and row.expires_at is not None
    reviewer_client.post(f"/facts/{card.id}/restore/", {"scope": scope_of(card)})
    row = FactCard.objects.get(id=card.id)
    assert row.status == CardStatus.ACTIVE and row.expires_at is None
    assert list(AuditEvent.objects.order_by("id").values_list("action", flat=True)) == ["expire", "restore"]


def test_expire_at_a_future_date_keeps_the_card_active_until_then(reviewer_client: Client, make_card) -> None:
    card = save_card(make_card(), actor="t")
    reviewer_client.post(f"/facts/{card.id}/expire/", {"scope": scope_of(card), "at": "2099-01-02T03:04"})
    row = FactCard.objects.get(id=card.id)
    assert row.status == CardStatus.ACTIVE
    assert row.expires_at.year == 2099


def test_setting_a_review_by_date(reviewer_client: Client, make_card) -> None:
    card = save_card(make_card(), actor="t")
    reviewer_client.post(f"/facts/{card.id}/review-by/", {"scope": scope_of(card), "review_by": "2027-03-01"})
    assert FactCard.objects.get(id=card.id).review_by.date().isoformat() == "2027-03-01"


def test_reverting_to_an_old_version(reviewer_client: Client, make_card, store: Store) -> None:
    card = save_card(make_card(content="Version one."), actor="t")
    correct(reviewer_client, card, content="Version two.")
    response = reviewer_client.post(f"/facts/{card.id}/revert/1/", {"scope": scope_of(card), "confirmed": "yes"})
    assert response.status_code == 302
    current = store.read_card(Bucket.of(card), card.id)
    assert (current.content, current.revision) == ("Version one.", 3)
    assert AuditEvent.objects.filter(action="revert", target=card.id).exists()


def test_a_reviewer_cannot_delete_permanently(reviewer_client: Client, make_card) -> None:
    card = save_card(make_card(), actor="t")
    assert reviewer_client.get(f"/facts/{card.id}/delete/").status_code == 403
    assert (
        reviewer_client.post(f"/facts/{card.id}/delete/", {"scope": scope_of(card), "confirm": card.id}).status_code
        == 403
    )
    assert FactCard.objects.filter(id=card.id).exists()


def test_delete_needs_the_confirm_step(admin_client_: Client, make_card) -> None:
    card = save_card(make_card(), actor="t")
    assert b"Type the fact id" in admin_client_.get(f"/facts/{card.id}/delete/").content
    admin_client_.post(f"/facts/{card.id}/delete/", {"scope": scope_of(card), "confirm": "yes"})
    assert FactCard.objects.filter(id=card.id).exists()


def test_delete_removes_file_mirror_and_history_but_the_audit_keeps_that_it_happened(
    admin_client_: Client, make_card, store: Store
) -> None:
    card = save_card(make_card(content="Secret thing to forget."), actor="t")
    response = admin_client_.post(
        f"/facts/{card.id}/delete/", {"scope": scope_of(card), "confirm": card.id, "reason": "GDPR"}
    )
    assert response.status_code == 302
    assert not store.card_path(card).exists()
    assert not FactCard.objects.filter(id=card.id).exists()
    assert not FactRevision.objects.filter(fact_id=card.id).exists()
    event = AuditEvent.objects.get(action="delete")
    assert (event.target, event.reason, event.actor) == (card.id, "GDPR", "boss")
    assert "Secret thing" not in str(event.details)


def test_forget_a_conversation_removes_only_that_threads_cards_in_that_scope(admin_client_: Client, make_card) -> None:
    from facts.storage.cardfile import Source

    same = save_card(make_card(source=Source(kind="extraction", thread_id="th-9")), actor="t")
    other_thread = save_card(make_card(source=Source(kind="extraction", thread_id="th-1")), actor="t")
    other_user = save_card(make_card(user_id="bob", source=Source(kind="extraction", thread_id="th-9")), actor="t")
    query = {"user": "alice", "agent": "coder", "thread": "th-9"}
    preview = admin_client_.get("/forget/", query)
    assert preview.context["cards"] == [FactCard.objects.get(id=same.id)]
    admin_client_.post("/forget/", query | {"confirm": "th-9"})
    assert set(FactCard.objects.values_list("id", flat=True)) == {other_thread.id, other_user.id}
    assert AuditEvent.objects.get(action="erase").details["counts"]["cards"] == 1


def test_a_reviewer_cannot_forget_a_conversation(reviewer_client: Client, make_card) -> None:
    from facts.storage.cardfile import Source

    save_card(make_card(source=Source(kind="extraction", thread_id="th-9")), actor="t")
    response = reviewer_client.post(
        "/forget/", {"user": "alice", "agent": "coder", "thread": "th-9", "confirm": "th-9"}
    )
    assert response.status_code == 403
    assert FactCard.objects.count() == 1


def test_conflicting_keys_are_shown_and_resolved_in_one_click(reviewer_client: Client, make_card) -> None:
    a = save_card(make_card(key="response_language", content="Answers in English."), actor="t")
    b = save_card(make_card(key="Response-Language", content="Answers in French.", category="correction"), actor="t")
    page = reviewer_client.get("/conflicts/")
    assert b"Answers in English." in page.content and b"Answers in French." in page.content
    assert b"contradicts a correction" in page.content
    reviewer_client.post("/conflicts/resolve/", {"keep": b.id, "others": f"{a.id},", "confirmed": "yes"})
    row = FactCard.objects.get(id=a.id)
    assert (row.status, row.superseded_by) == (CardStatus.SUPERSEDED, b.id)
    assert b"No conflicts." in reviewer_client.get("/conflicts/").content


def test_resolving_across_scopes_is_refused(reviewer_client: Client, make_card) -> None:
    a = save_card(make_card(user_id="alice", key="k"), actor="t")
    b = save_card(make_card(user_id="bob", key="k"), actor="t")
    assert reviewer_client.post("/conflicts/resolve/", {"keep": a.id, "others": b.id}).status_code == 404
    assert FactCard.objects.get(id=b.id).status == CardStatus.ACTIVE


def test_facts_past_their_review_by_date_are_listed(viewer_client: Client, make_card) -> None:
    from facts.storage.cardfile import now_utc

    save_card(make_card(content="Check me again.", review_by=now_utc() - timedelta(days=1)), actor="t")
    save_card(make_card(content="Not yet.", review_by=now_utc() + timedelta(days=10)), actor="t")
    body = viewer_client.get("/conflicts/").content
    assert b"Check me again." in body and b"Not yet." not in body


def test_posts_without_a_csrf_token_are_refused(reviewer, make_card) -> None:
    card = save_card(make_card(), actor="t")
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)
    response = client.post(f"/facts/{card.id}/expire/", {"scope": scope_of(card)}, headers={"HX-Request": "true"})
    assert response.status_code == 403
    assert FactCard.objects.get(id=card.id).status == CardStatus.ACTIVE


def test_pages_with_arguments_require_login(make_card) -> None:
    card = save_card(make_card(), actor="t")
    for url in (f"/facts/{card.id}/", f"/facts/{card.id}/delete/", "/review/1/", "/index/rebuild/1/"):
        response = Client().get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url
