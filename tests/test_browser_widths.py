"""A curator's day on any screen (issue 37), in a real browser (Debian's chromium):

- at 390, 768 and 1280 px no page is wider than the screen and no table sticks out of
  its card (bench/page_widths.py prints the same check for the demo data);
- on a phone the review queue's Approve/Dismiss are in reach and the navigation is one
  short row;
- a profile edited in two sections keeps both; leaving with unsaved text asks first;
- a fact added by hand is in the context preview at once;
- Back after deleting a fact asks the server again instead of showing it "active".

Screenshots go to test-artifacts/widths-*.png.
"""

from __future__ import annotations

from typing import Any

import pytest

from facts.judging.pipeline import run_turns_now
from facts.models import Candidate, ExtractionRun, FactCard
from facts.storage.store import get_store
from facts.storage.writer import save_card
from tests.erasure_seed import turns
from tests.test_browser_dashboard import ARTIFACTS, browser, csp_violations, login, page  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = (390, 768, 1280)
PHONE = {"width": 390, "height": 844}

# A table, a pre or a form whose right edge is past its card's: the card does not hold it.
STICKING_OUT = """() => [...document.querySelectorAll('.card table, .card pre, .card form, .card .side')]
  .filter((el) => el.getBoundingClientRect().right > el.closest('.card').getBoundingClientRect().right + 0.5)
  .map((el) => el.tagName + '.' + el.className)"""


def shot(page: Any, name: str) -> None:  # noqa: F811
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"widths-{name}.png"), full_page=True)


def _pages() -> list[str]:
    fact = FactCard.objects.filter(user_id="xena").order_by("pk").first()
    run = ExtractionRun.objects.order_by("pk").first()
    candidate = Candidate.objects.order_by("pk").first()
    assert fact and run and candidate, "the seed gives every kind of object a page"
    return [
        "/",
        "/review/",
        "/review/?state=all",
        f"/review/{candidate.pk}/",
        "/facts/",
        f"/facts/{fact.pk}/",
        "/facts/add/",
        "/conflicts/",
        "/users/",
        "/users/xena/",
        "/people/",
        "/people/user/?user=xena",
        "/profiles/?user=xena",
        "/preview/?user=xena&agent=coder",
        "/search/?user=xena&agent=coder&q=deploy",
        "/index/",
        "/turns/",
        "/runs/",
        f"/runs/{run.pk}/",
        "/gate/",
        "/gate/backtest/?threshold=0.5",
        "/injections/?user=xena&agent=coder",
        "/audit/",
        "/agents/",
        "/team/",
        "/export/?user=xena",
    ]


@pytest.mark.parametrize("width", WIDTHS)
def test_no_page_is_wider_than_the_screen(page: Any, width: int) -> None:  # noqa: F811
    for t in turns():
        run_turns_now(**t)
    login(page, "admin")
    page.set_viewport_size({"width": width, "height": 844})
    wide: dict[str, int] = {}
    sticking: dict[str, list[str]] = {}
    for url in ["/login/", *_pages()]:
        if url == "/login/":
            continue  # checked below, signed out
        response = page.goto(url)
        assert response is not None and response.status == 200, url
        scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert inner == width
        if scroll > inner:
            wide[url] = scroll
        if out := page.evaluate(STICKING_OUT):
            sticking[url] = out
    shot(page, f"{width}-last")
    assert wide == {}, f"pages wider than {width} px"
    assert sticking == {}, "tables or forms sticking out of their card"


def test_the_login_page_fits_a_phone(browser: Any, live_server: Any) -> None:  # noqa: F811
    context = browser.new_context(viewport=PHONE, base_url=live_server.url)
    view = context.new_page()
    view.goto("/login/")
    assert view.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    context.close()


def test_on_a_phone_the_queues_actions_are_in_reach_and_the_nav_is_one_row(
    page: Any,  # noqa: F811
    make_candidate: Any,
) -> None:
    first = make_candidate(content="Works in Python backends.", key="work_stack")
    second = make_candidate(content="Prefers answers in English.", key="response_language")
    login(page)
    page.set_viewport_size(PHONE)
    page.goto("/review/")
    nav = page.locator("nav.nav").bounding_box()
    assert nav is not None and nav["height"] < 50, "the navigation is one row"
    assert page.locator("header.topbar").bounding_box()["height"] < 110
    assert page.locator("nav.nav [aria-current=page]").inner_text().startswith("Review")
    for pk in (first.pk, second.pk):
        for name in ("Approve", "Dismiss"):
            button = page.locator(f"#candidate-{pk} button:text-is('{name}')")
            box = button.bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], (pk, name)
    shot(page, "phone-review-queue")

    page.fill(f"#candidate-{first.pk} input[name=note]", "Confirmed in the call.")
    page.click(f"#candidate-{first.pk} button:text-is('Approve')")
    page.wait_for_selector(f"#candidate-{first.pk} >> text=approved")
    page.click(f"#candidate-{second.pk} button:text-is('Dismiss')")
    page.wait_for_selector(f"#candidate-{second.pk} >> text=dismissed")
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.review_state, second.review_state) == ("approved", "dismissed")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "phone-review-done")


def test_a_profile_edited_in_two_sections_keeps_both_and_leaving_unsaved_asks_first(
    page: Any,  # noqa: F811
    make_card: Any,
) -> None:
    save_card(make_card(user_id="alice"), actor="t")  # a person memory holds (issue 33): no profile yet
    login(page)
    page.set_viewport_size(PHONE)
    page.goto("/profiles/?user=alice")
    page.click("#section-workContext textarea")
    page.keyboard.type("Backend developer, Python and Go.")
    page.click("#section-topOfMind textarea")
    page.keyboard.type("Learning context engineering.")
    assert page.is_visible(".dirty-note")  # the save bar says there are unsaved changes

    asked: list[str] = []

    def stay(dialog: Any) -> None:
        asked.append(dialog.type)
        dialog.dismiss()

    page.on("dialog", stay)
    page.click("nav >> text=Facts", no_wait_after=True)
    page.wait_for_timeout(500)
    page.remove_listener("dialog", stay)
    assert asked == ["beforeunload"] and "/profiles/" in page.url
    assert page.input_value("#section-workContext textarea") == "Backend developer, Python and Go."

    page.click("#profile-form button:text-is('Save profile')")
    page.wait_for_selector("text=Saved Work context, Top of mind")
    profile = get_store().read_profile("alice")
    assert profile.section("workContext").summary == "Backend developer, Python and Go."
    assert profile.section("topOfMind").summary == "Learning context engineering."
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "phone-profile-saved")
    page.click("nav >> text=Facts")  # saved: leaving asks nothing
    page.wait_for_url("**/facts/")


def test_a_fact_added_by_hand_on_a_phone_is_in_the_preview_at_once(page: Any) -> None:  # noqa: F811
    login(page)
    page.set_viewport_size(PHONE)
    page.goto("/facts/")
    page.click("#add-fact")
    page.fill("input[name=user]", "alice")
    page.fill("input[name=agent]", "coder")
    page.fill("input[name=key]", "answer style")
    page.select_option("select[name=category]", "preference")
    page.fill("textarea[name=content]", "Wants the shortest working example first.")
    shot(page, "phone-add-fact")
    page.click("#add-fact-form button[type=submit]")
    page.wait_for_selector("text=live now, in the context preview")
    card = FactCard.objects.get(content="Wants the shortest working example first.")
    assert (card.key, card.source_kind) == ("answer_style", "manual")
    page.click("#preview-scope")
    page.wait_for_selector("#context-text")
    assert "Wants the shortest working example first." in page.inner_text("#context-text")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "phone-preview-after-add")


def test_back_after_deleting_a_fact_does_not_show_it_active(page: Any, make_card: Any) -> None:  # noqa: F811
    card = save_card(make_card(content="Prefers tabs.", key="indentation"), actor="seed")
    login(page, "admin")
    page.goto(f"/facts/{card.id}/")
    assert "active" in page.inner_text("h1")
    page.goto(f"/facts/{card.id}/delete/")
    page.fill("input[name=confirm]", card.id)
    page.click("button:text-is('Delete permanently')")
    page.wait_for_url("**/facts/")
    assert not FactCard.objects.filter(id=card.id).exists()
    page.go_back()  # the delete page
    page.go_back()  # the fact's page: asked again (no-store), now a 404
    assert page.url.endswith(f"/facts/{card.id}/")
    assert page.is_visible("#error-page")
    assert "Prefers tabs." not in page.inner_text("body")
