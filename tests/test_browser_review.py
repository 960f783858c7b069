"""The curators' journeys of issue 21 in a real browser: selecting rows to approve,
dismiss then undo, keyboard keys, reverting a profile through the confirm dialog, and
the context preview opened from Agents & keys and from a profile.

Screenshots go to test-artifacts/dashboard-review-*.png.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Group, User

from facts.access import ensure_roles
from facts.models import AuditEvent, Candidate, ProfileRevision
from facts.storage.profilefile import Section
from facts.storage.writer import commit_profile, save_card
from tests import test_browser_dashboard as journeys

# The dashboard journeys' fixtures: one chromium per module, a page that fails the test on
# any Content-Security-Policy violation.
browser = journeys.browser
csp_violations = journeys.csp_violations
page = journeys.page
shot = journeys.shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def login_as(page: Any, role: str) -> None:
    ensure_roles()
    user = User.objects.create_user(f"{role}-r", "", "pw-browser")
    user.groups.add(Group.objects.get(name=role))
    page.goto("/login/")
    page.fill("input[name=username]", f"{role}-r")
    page.fill("input[name=password]", "pw-browser")
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/$"))


def test_it_approves_the_selected_rows_only(page: Any, make_candidate: Any) -> None:
    a, b, c = (make_candidate(content=f"Selected {n}.", key=f"key_{n}") for n in "abc")
    login_as(page, "reviewer")
    page.goto("/review/")
    page.check(f"#candidate-{a.pk} input[name=ids]")
    page.check(f"#candidate-{c.pk} input[name=ids]")
    assert page.inner_text("#selected-count") == "Selected rows: 2"
    page.fill("#selected-form input[name=note]", "Both are right.")
    shot(page, "review-01-selected")
    page.click("#selected-form button[value=approve]")
    page.wait_for_selector("text=Approved 2 selected candidate(s).")
    shot(page, "review-02-approved")
    states = dict(Candidate.objects.values_list("pk", "review_state"))
    assert states == {a.pk: "approved", b.pk: "pending", c.pk: "approved"}


def test_it_dismisses_then_undoes_from_the_row_and_with_keys(page: Any, make_candidate: Any) -> None:
    first = make_candidate(content="First one.", key="k1")
    second = make_candidate(content="Second one.", key="k2")
    login_as(page, "reviewer")
    page.goto("/review/")
    # Rows newest first: j lands on the second candidate, d dismisses it (htmx swaps the row).
    page.keyboard.press("j")
    page.keyboard.press("d")
    page.wait_for_selector(f"#candidate-{second.pk} >> text=Undo dismiss")
    shot(page, "review-03-dismissed")
    assert Candidate.objects.get(pk=second.pk).review_state == "dismissed"
    page.click(f"#candidate-{second.pk} >> text=Undo dismiss")
    page.wait_for_selector(f"#candidate-{second.pk} >> text=Approve")
    assert Candidate.objects.get(pk=second.pk).review_state == "pending"
    assert AuditEvent.objects.filter(action="restore", target=f"candidate:{second.pk}").exists()
    # ? opens the keys' help; Escape closes it.
    page.keyboard.press("?")
    page.wait_for_selector("#keys-help[open]")
    shot(page, "review-04-keys-help")
    page.keyboard.press("Escape")
    assert Candidate.objects.get(pk=first.pk).review_state == "pending"
    # j twice reaches the first candidate; a asks for the reason, Enter approves.
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("a")
    page.keyboard.type("She said it twice.")
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#candidate-{first.pk} >> text=approved")
    assert Candidate.objects.get(pk=first.pk).review_note == "She said it twice."


def test_it_reverts_a_profile_after_confirming_in_a_dialog(page: Any) -> None:
    def write(text: str):
        def change(profile):
            profile.set_section("workContext", Section(summary=text))
            return profile

        return change

    commit_profile("li.wei", write("Builds compilers."), actor="t", reason="first")
    commit_profile("li.wei", write("Sells boats."), actor="t", reason="second")
    first = ProfileRevision.objects.filter(user_id="li.wei").order_by("revision")[0].revision
    login_as(page, "reviewer")
    page.goto("/profiles/?user=li.wei")
    page.wait_for_selector("#section-workContext label:text-is('Work context')")
    # The revert control sits beside its version, not inside a fold (issue 37).
    page.click(f"#version-{first} >> text=Revert to version {first}…")
    page.wait_for_selector("#confirm-dialog[open]")
    shot(page, "review-05-revert-dialog")
    page.click("#confirm-ok")
    page.wait_for_selector(f"text=Reverted to version {first}")
    shot(page, "review-06-reverted")
    latest = ProfileRevision.objects.filter(user_id="li.wei").order_by("-revision")[0]
    assert latest.document["user"]["workContext"]["summary"] == "Builds compilers."


def test_it_opens_the_preview_filled_in_from_agents_and_from_a_profile(page: Any, make_card: Any) -> None:
    save_card(make_card(user_id="li.wei", agent_name="coder", content="Prefers Rust."), actor="t")
    login_as(page, "admin")
    page.goto("/agents/")
    page.click("a:text('preview…')")
    page.wait_for_selector("#context-text")
    assert page.input_value("input[name=user]") == "li.wei"
    assert "Prefers Rust." in page.inner_text("#preview-result")
    assert page.locator("text=This field is required").count() == 0
    shot(page, "review-07-preview-from-agents")
    page.goto("/profiles/?user=li.wei")
    page.click("text=Preview their context")
    page.wait_for_selector("#context-text")
    assert page.input_value("input[name=agent]") == "coder"
    assert page.locator("text=This field is required").count() == 0
    # A field sent empty reports its error; the next preview clears it with the result.
    page.goto("/preview/?user=li.wei&agent=")
    page.wait_for_selector("text=This field is required")
    page.fill("input[name=agent]", "coder")
    page.click("#preview-page button[type=submit]")
    page.wait_for_selector("#context-text")
    assert page.locator("text=This field is required").count() == 0
    shot(page, "review-08-preview-from-profile")


def test_without_javascript_revoking_a_key_goes_through_the_confirm_page(browser: Any, live_server: Any) -> None:
    from memoryadmin.models import ApiKey

    context = browser.new_context(java_script_enabled=False, base_url=live_server.url)
    nojs = context.new_page()
    try:
        login_as(nojs, "admin")
        nojs.goto("/agents/")
        nojs.fill("input[name=name]", "ci-runner")
        nojs.click("text=Create key")
        nojs.goto("/agents/")
        nojs.click("button:text('Revoke')")
        nojs.wait_for_selector("#confirm-step")
        shot(nojs, "review-09-confirm-page-nojs")
        assert ApiKey.objects.get(name="ci-runner").active
        nojs.click("#confirm-step button[type=submit]")
        nojs.wait_for_selector("text=Key ci-runner revoked.")
        assert not ApiKey.objects.get(name="ci-runner").active
    finally:
        context.close()


def test_the_fact_page_is_headed_by_its_text(page: Any, make_card: Any) -> None:
    card = save_card(make_card(user_id="li.wei", key="editor", content="Uses Helix as editor."), actor="t")
    login_as(page, "viewer")
    page.goto(f"/facts/{card.id}/")
    assert page.inner_text("h1").startswith("Uses Helix as editor.")
    assert "/tmp/" not in page.inner_text("main")
    shot(page, "review-10-fact-page")


def test_the_preview_says_why_facts_were_left_out(page: Any, make_card: Any) -> None:
    def fill(profile):
        profile.set_section("workContext", Section(summary="Works on compilers " * 20))
        return profile

    commit_profile("li.wei", fill, actor="t", reason="seed")
    save_card(
        make_card(user_id="li.wei", category="correction", content="Name: Li Wei, not Wei Li. " + "Li Wei. " * 40),
        actor="t",
    )
    save_card(make_card(user_id="li.wei", content="Prefers Rust. " * 30), actor="t")
    login_as(page, "viewer")
    page.goto("/preview/?user=li.wei&agent=coder&budget=200&correction_budget=190")
    page.wait_for_selector("table.excluded")
    why = page.inner_text("table.excluded")
    assert "the correction budget, 190, is a cap inside the total" in why
    assert "budget did not fit in the budget" not in why
    assert page.locator("#no-included").count() == 1
    shot(page, "review-11-preview-left-out")
