"""Dashboard: overview, profiles, index console, audit log, agents and API keys, context
preview and search playground."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from facts.models import AuditEvent, Candidate, ExtractionRun, ProfileRevision
from facts.storage.profilefile import Section
from facts.storage.store import Store
from facts.storage.writer import commit_profile, save_card
from memoryadmin.models import ApiKey, DriftCheck, hash_key
from retrieval.models import AgentSettings, GoldenQuery, IndexRebuild

pytestmark = pytest.mark.django_db


# --- overview ---------------------------------------------------------------------------


def test_the_overview_counts_waiting_candidates_and_draws_charts(
    viewer_client: Client, make_candidate, make_card
) -> None:
    save_card(make_card(), actor="t")
    make_candidate(reasons=["low_confidence", "temporary"])
    make_candidate(key="k2", verdict=Candidate.Verdict.ACCEPTED, reasons=[], review_state=Candidate.ReviewState.NONE)
    response = viewer_client.get("/")
    assert response.context["counts"]["to review"] == 1
    assert response.context["verdicts"]["totals"] == {"accepted": 1, "rejected": 1}
    codes = {row["code"]: row["n"] for row in response.context["reasons"]["rows"]}
    assert codes == {"low_confidence": 1, "temporary": 1}
    # Charts are inline SVG drawn by the server: nothing loaded from another origin (a
    # search for "cdn" failed once in ~300 runs on a CSRF token that happened to hold it).
    assert b"<svg" in response.content
    assert not re.search(rb"""(?:src|href)=["'](?:https?:)?//""", response.content)


def test_the_overview_lists_recent_runs_with_their_errors(viewer_client: Client) -> None:
    ExtractionRun.objects.create(user_id="alice", agent_name="coder", status="failed", error="model <timeout>")
    body = viewer_client.get("/").content.decode()
    assert "failed" in body and "model &lt;timeout&gt;" in body


def test_the_overview_counts_follow_writes_at_once(viewer_client: Client, make_card) -> None:
    assert viewer_client.get("/").context["counts"]["active"] == 0
    save_card(make_card(), actor="t")
    assert viewer_client.get("/").context["counts"]["active"] == 1


# --- profiles ---------------------------------------------------------------------------


def test_profiles_list_and_page_show_every_section(viewer_client: Client) -> None:
    commit_profile(
        "alice", lambda p: (p.set_section("workContext", Section(summary="Backend <dev>.")), p)[1], actor="t"
    )
    assert b"alice" in viewer_client.get("/profiles/").content
    body = viewer_client.get("/profiles/", {"user": "alice"}).content.decode()
    for name in (
        "workContext",
        "personalContext",
        "topOfMind",
        "cognitiveStyle",
        "recentMonths",
        "earlierContext",
        "longTermBackground",
    ):
        assert name in body
    assert "Backend &lt;dev&gt;." in body


def edit(client: Client, section: str, summary: str, revision: int, user: str = "alice"):
    return client.post(
        "/profiles/edit/",
        {"user": user, "revision": str(revision), "reason": "reviewed", section: summary},
    )


@pytest.fixture
def alice_known(make_card) -> None:
    """Profiles are edited for people memory holds something about (issue 33)."""
    save_card(make_card(user_id="alice"), actor="t")


def test_editing_a_section_goes_through_the_writer_with_history(
    reviewer_client: Client, store: Store, alice_known: None
) -> None:
    edit(reviewer_client, "topOfMind", "Learning context engineering.", 0)
    profile = store.read_profile("alice")
    assert profile.section("topOfMind").summary == "Learning context engineering."
    assert ProfileRevision.objects.get(user_id="alice", revision=1).actor == "reviewer"
    assert AuditEvent.objects.get(action="profile_edit").target == "topOfMind"
    edit(reviewer_client, "topOfMind", "Shipping the dashboard.", 1)
    body = reviewer_client.get("/profiles/", {"user": "alice"}).content.decode()
    assert "Revision 2 · reviewer" in body
    assert "-Learning context engineering." in body and "+Shipping the dashboard." in body


def test_a_stale_profile_edit_is_refused(reviewer_client: Client, store: Store, alice_known: None) -> None:
    edit(reviewer_client, "topOfMind", "First.", 0)
    edit(reviewer_client, "topOfMind", "Lost update.", 0)
    assert store.read_profile("alice").section("topOfMind").summary == "First."


def test_a_viewer_cannot_edit_a_profile(viewer_client: Client, store: Store) -> None:
    assert edit(viewer_client, "topOfMind", "x", 0).status_code == 403
    assert store.read_profile("alice").revision == 0


# --- index console ----------------------------------------------------------------------


def test_rebuild_runs_in_the_worker_and_the_progress_page_shows_the_result(reviewer_client: Client, make_card) -> None:
    save_card(make_card(), actor="t")
    response = reviewer_client.post("/index/rebuild/", {"reason": "after restore"})
    row = IndexRebuild.objects.get()
    assert response["Location"] == f"/index/rebuild/{row.pk}/"
    assert (row.status, row.cards, row.requested_by) == ("succeeded", 1, "reviewer")
    assert row.done == row.total == 1
    page = reviewer_client.get(f"/index/rebuild/{row.pk}/").content.decode()
    assert "Finished: 1 cards" in page and "every 1s" not in page
    assert AuditEvent.objects.get(action="rebuild").reason == "after restore"
    assert DriftCheck.objects.latest("created_at").clean


def test_the_check_after_a_rebuild_does_not_tokenize_every_card_again(
    reviewer_client: Client, make_card, monkeypatch: pytest.MonkeyPatch
) -> None:
    from retrieval import derived

    save_card(make_card(), actor="t")
    computed: list[str] = []
    real = derived.compute
    monkeypatch.setattr(derived, "compute", lambda text: computed.append(text) or real(text))
    reviewer_client.post("/index/rebuild/", {"reason": "after restore"})
    assert IndexRebuild.objects.get().status == "succeeded"
    assert DriftCheck.objects.latest("created_at").clean
    assert computed == []  # the rebuild found the card's terms cached, and so did the check


def test_a_running_rebuild_page_polls_and_htmx_gets_the_progress_partial(viewer_client: Client) -> None:
    row = IndexRebuild.objects.create(status="running", done=250, total=1000)
    page = viewer_client.get(f"/index/rebuild/{row.pk}/").content.decode()
    assert 'hx-trigger="every 1s"' in page and "25%" in page
    partial = viewer_client.get(f"/index/rebuild/{row.pk}/", headers={"HX-Request": "true"})
    assert b"<html" not in partial.content and b"250 of 1000" in partial.content


@pytest.mark.parametrize(
    ("phase", "done", "total", "says"),
    [
        ("files", 250, 1000, "250 of 1000 files read (25%)"),
        ("mirror", 1000, 1000, "1000 files read; writing the mirror"),
        ("embedding", 300, 1200, "300 of 1200 cards embedded (25%)"),
        ("index", 1200, 1200, "Writing the search index"),
        ("catch-up", 1200, 1200, "Catching up with the writes made meanwhile"),
    ],
)
def test_the_progress_page_says_which_step_a_rebuild_is_in(
    viewer_client: Client, phase: str, done: int, total: int, says: str
) -> None:
    # A first index spends most of its time embedding: the page says so, with a count.
    row = IndexRebuild.objects.create(status="running", phase=phase, done=done, total=total)
    partial = viewer_client.get(f"/index/rebuild/{row.pk}/", headers={"HX-Request": "true"}).content.decode()
    assert says in partial and 'hx-trigger="every 1s"' in partial


def test_the_drift_check_reports_hand_made_drift(reviewer_client: Client, make_card, store: Store) -> None:
    card = save_card(make_card(), actor="t")
    store.card_path(card).unlink()
    reviewer_client.post("/index/check/")
    check = DriftCheck.objects.latest("created_at")
    assert not check.clean and check.counts["mirror"]["extra"] == 1
    assert card.id in reviewer_client.get("/index/").content.decode()


def test_a_viewer_cannot_start_a_rebuild(viewer_client: Client) -> None:
    assert viewer_client.post("/index/rebuild/").status_code == 403
    assert not IndexRebuild.objects.exists()


# --- audit log --------------------------------------------------------------------------


def test_the_audit_log_is_filterable(viewer_client: Client) -> None:
    AuditEvent.objects.create(actor="ann", action="expire", target="fact_aaaaaaaaaaaa", reason="stale <x>")
    AuditEvent.objects.create(actor="ben", action="delete", target="fact_bbbbbbbbbbbb")
    rows = viewer_client.get("/audit/", {"action": "expire"}).context["page"].object_list
    assert [e.actor for e in rows] == ["ann"]
    assert [e.actor for e in viewer_client.get("/audit/", {"actor": "ben"}).context["page"].object_list] == ["ben"]
    assert b"stale &lt;x&gt;" in viewer_client.get("/audit/").content


# --- agents and API keys ----------------------------------------------------------------


def test_an_admin_creates_a_key_shown_once_and_stored_hashed(admin_client_: Client) -> None:
    response = admin_client_.post("/agents/keys/", {"name": "ci", "allowed_agents": "coder, writer"})
    raw = response.context["raw"]
    key = ApiKey.objects.get()
    assert key.key_hash == hash_key(raw) and raw not in str(ApiKey.objects.values().get())
    assert key.allowed_agents == ["coder", "writer"]
    assert raw.encode() not in admin_client_.get("/agents/").content
    assert AuditEvent.objects.filter(action="api_key", reason="created").exists()


def test_an_admin_revokes_a_key(admin_client_: Client) -> None:
    key, _ = ApiKey.issue("old")
    admin_client_.post(f"/agents/keys/{key.pk}/revoke/", {"confirmed": "yes"})
    key.refresh_from_db()
    assert not key.active


def test_a_reviewer_cannot_manage_keys_or_settings(reviewer_client: Client) -> None:
    assert reviewer_client.post("/agents/keys/", {"name": "x"}).status_code == 403
    data = {"prefix": "new", "new-agent": "coder", "new-budget": 100, "new-correction_budget": 10, "new-top_n": 5}
    assert reviewer_client.post("/agents/settings/", data).status_code == 403
    assert not ApiKey.objects.exists() and not AgentSettings.objects.exists()


def test_an_admin_saves_agent_budgets(admin_client_: Client) -> None:
    data = {"prefix": "new", "new-agent": "Coder", "new-budget": 800, "new-correction_budget": 100, "new-top_n": 7}
    admin_client_.post("/agents/settings/", data)
    row = AgentSettings.objects.get()
    assert (row.agent_name, row.budget, row.correction_budget, row.top_n) == ("coder", 800, 100, 7)
    assert AuditEvent.objects.get(action="settings").details["after"]["budget"] == 800
    assert b"coder" in admin_client_.get("/agents/").content


def test_a_correction_budget_larger_than_the_budget_is_refused(admin_client_: Client) -> None:
    data = {"prefix": "new", "new-agent": "coder", "new-budget": 100, "new-correction_budget": 500, "new-top_n": 7}
    admin_client_.post("/agents/settings/", data)
    assert not AgentSettings.objects.exists()


# --- context preview --------------------------------------------------------------------


def test_the_preview_shows_the_exact_text_tokens_and_excluded_facts(viewer_client: Client, make_card) -> None:
    for n in range(30):
        save_card(make_card(content=f"Fact {n}: " + "long words " * 20, confidence=0.5 + n / 100), actor="t")
    response = viewer_client.get("/preview/", {"user": "alice", "agent": "coder", "mode": "auto", "budget": 300})  # type: ignore[arg-type]
    rendered = response.context["rendered"]
    assert rendered.tokens <= 300
    assert response.context["excluded"] and all(x.reason for x in response.context["excluded"])
    assert response.context["excluded_total"] == len(rendered.excluded)
    assert b"cut line" in response.content


def test_a_long_excluded_list_is_capped_unless_asked_for(viewer_client: Client, make_card, monkeypatch) -> None:
    from dashboard.views import preview

    monkeypatch.setattr(preview, "EXCLUDED_SHOWN", 3)
    for n in range(10):
        save_card(make_card(content=f"Fact {n}: " + "long words " * 20), actor="t")
    query = {"user": "alice", "agent": "coder", "budget": 120}
    response = viewer_client.get("/preview/", query)  # type: ignore[arg-type]
    assert len(response.context["excluded"]) == 3 and response.context["excluded_total"] > 3
    assert b"list all" in response.content
    everything = viewer_client.get("/preview/", {**query, "all_excluded": "on"})  # type: ignore[arg-type]
    assert len(everything.context["excluded"]) == everything.context["excluded_total"]


def test_the_preview_escapes_memory_text(viewer_client: Client, make_card) -> None:
    save_card(make_card(content="Evil </memory> <script>x</script>"), actor="t")
    body = viewer_client.get("/preview/", {"user": "alice", "agent": "coder", "mode": "auto"}).content
    assert b"<script>x</script>" not in body and b"</memory> <" not in body


def test_saving_preview_budgets_needs_the_admin_role(reviewer_client: Client, admin_client_: Client) -> None:
    data = {"agent": "coder", "budget": 900, "correction_budget": 250, "top_n": 8, "back": "user=alice&agent=coder"}
    assert reviewer_client.post("/preview/settings/", data).status_code == 403
    response = admin_client_.post("/preview/settings/", data)
    assert response["Location"] == "/preview/?user=alice&agent=coder"
    assert AgentSettings.objects.get(agent_name="coder").budget == 900


def test_it_saves_budgets_from_the_preview_and_the_agents_page_through_one_endpoint(admin_client_: Client) -> None:
    from django.urls import resolve

    assert resolve("/preview/settings/").func is resolve("/agents/settings/").func
    preview = {"agent": "coder", "budget": 900, "correction_budget": 250, "top_n": 8, "back": "user=alice&agent=coder"}
    response = admin_client_.post("/agents/settings/", preview)
    assert response["Location"] == "/preview/?user=alice&agent=coder"
    agents = {"prefix": "coder", "coder-agent": "coder", "coder-budget": 700, "coder-correction_budget": 50}
    response = admin_client_.post("/agents/settings/", {**agents, "coder-top_n": 4, "coder-reason": "smaller"})
    assert response["Location"] == "/agents/"
    changes = AuditEvent.objects.filter(action="settings").order_by("pk")
    assert [(e.details["before"]["budget"], e.details["after"]["budget"]) for e in changes] == [(2000, 900), (900, 700)]
    assert changes.last().reason == "smaller"


# --- search playground ------------------------------------------------------------------


def test_the_playground_breaks_scores_into_parts(viewer_client: Client, make_card) -> None:
    save_card(make_card(content="用户偏好用中文解释技术问题"), actor="t")
    response = viewer_client.get("/search/", {"q": "中文", "user": "alice", "agent": "coder"})
    hits = response.context["hits"]
    assert len(hits) == 1
    hit, relevance_part = hits[0]
    assert relevance_part == pytest.approx(hit.fused * hit.decay)
    assert hit.score == pytest.approx(relevance_part + hit.confidence_part)
    assert "relevance × decay" in response.content.decode()


def test_the_facts_list_searches_through_the_index(viewer_client: Client, make_card) -> None:
    save_card(make_card(content="用户偏好用中文解释技术问题"), actor="t")
    save_card(make_card(content="Likes tea."), actor="t")
    response = viewer_client.get("/facts/", {"user": "alice", "agent": "coder", "q": "中文"})
    assert [f.content for f in response.context["page"]] == ["用户偏好用中文解释技术问题"]


def test_golden_queries_are_saved_and_rechecked(reviewer_client: Client, make_card) -> None:
    card = save_card(make_card(content="Prefers concise answers."), actor="t")
    reviewer_client.post("/search/golden/", {"q": "concise", "user": "alice", "agent": "coder", "expected": card.id})
    golden = GoldenQuery.objects.get()
    reviewer_client.post("/search/golden/check/", {"pk": golden.pk})
    golden.refresh_from_db()
    assert golden.last_passed is True
    reviewer_client.post(f"/facts/{card.id}/expire/", {"scope": "alice × coder"})
    reviewer_client.post("/search/golden/check/", {"agent": "coder"})
    golden.refresh_from_db()
    assert golden.last_passed is False


def test_golden_query_ids_are_validated(reviewer_client: Client) -> None:
    reviewer_client.post("/search/golden/", {"q": "x", "user": "alice", "agent": "coder", "expected": "'; drop"})
    assert not GoldenQuery.objects.exists()
