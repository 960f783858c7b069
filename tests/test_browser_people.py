"""People and team journeys in a real browser: users list → a person → export; the
pickers; an admin creates a reviewer who sets a password, logs in and meets the 403 of
/team/. Screenshots go to test-artifacts/ (people-*.png)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from facts.judging.pipeline import run_turns_now
from tests.erasure_seed import turns
from tests.test_browser_dashboard import ARTIFACTS, browser, csp_violations, login, page  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def shot(tab: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / f"people-{name}.png"), full_page=True)


def test_users_list_then_a_person_then_export(page: Any) -> None:  # noqa: F811
    for t in turns():
        run_turns_now(**t)
    login(page, "admin")

    page.click("nav >> text=Users")
    page.wait_for_selector("#user-rows >> text=xena")
    shot(page, "01-users")
    page.fill("input[name=q]", "yu")
    page.click("button:has-text('Filter')")
    page.wait_for_selector("#user-rows >> text=xena", state="detached")
    assert "yuri" in page.inner_text("#user-rows")
    page.goto("/users/")
    page.click("#user-rows >> text=xena")
    page.wait_for_url(re.compile(r"/users/xena/$"))
    for section in ("#profile", "#facts", "#threads", "#runs", "#candidates", "#activity"):
        assert page.is_visible(section), section
    assert "x-t1" in page.inner_text("#threads")
    shot(page, "02-person")

    page.click("text=Export…")
    page.wait_for_url(re.compile(r"/export/\?user=xena$"))
    shot(page, "03-export")
    with page.expect_download() as download:
        page.click("main form button:has-text('Export')")
    assert download.value.suggested_filename.endswith(".zip")
    page.goto("/users/xena/")
    assert "export" in page.inner_text("#activity")  # the export is audited, on the person's page


def test_the_pickers_suggest_ids_as_one_types(page: Any) -> None:  # noqa: F811
    for t in turns():
        run_turns_now(**t)
    login(page, "viewer")

    page.goto("/facts/")
    page.type("#id_user", "xe", delay=50)
    page.wait_for_selector("#id_user-options option[value=xena]", state="attached")
    page.type("#id_agent", "co", delay=50)
    page.wait_for_selector("#id_agent-options option[value=coder]", state="attached")
    assert page.url.endswith("/facts/")  # the picker does not push its own URL


def test_an_admin_adds_a_reviewer_who_then_meets_the_team_403(page: Any, browser: Any, live_server: Any) -> None:  # noqa: F811
    login(page, "admin")
    page.click("nav >> text=Team")
    page.fill("input[name=username]", "rita")
    page.select_option("select[name=role]", "reviewer")
    page.click("text=Create and get a set-password link")
    page.wait_for_selector("#set-password-link")
    link = page.inner_text("#set-password-link .secret").strip()
    assert "rita" in page.inner_text("table")
    shot(page, "04-team")

    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=live_server.url)
    rita = context.new_page()
    try:
        rita.goto(link)
        rita.fill("input[name=new_password1]", "Ve7y-long-pass")
        rita.fill("input[name=new_password2]", "Ve7y-long-pass")
        rita.click("button[type=submit]")
        rita.wait_for_selector("text=Password set")
        rita.click("text=log in")
        rita.fill("input[name=username]", "rita")
        rita.fill("input[name=password]", "Ve7y-long-pass")
        rita.click("button[type=submit]")
        rita.wait_for_url(re.compile(r"/$"))
        assert not rita.is_visible("nav >> text=Team")  # reviewers are not offered the page
        response = rita.goto("/team/")
        assert response.status == 403
        assert rita.is_visible("#error-page") and rita.is_visible("nav >> text=Users")
        rita.screenshot(path=str(ARTIFACTS / "people-05-team-403.png"), full_page=True)
        missing = rita.goto("/users/nobody/")
        assert missing.status == 404 and rita.is_visible("#error-page")
        rita.screenshot(path=str(ARTIFACTS / "people-06-404.png"), full_page=True)
    finally:
        context.close()
