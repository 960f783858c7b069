"""The dashboard's main journeys in a real browser (Debian's chromium through Playwright).

Each journey saves screenshots under test-artifacts/ so a person can look at the pages.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Playwright's sync API runs an event loop in this thread; Django's ORM calls made by the
# test itself are still synchronous and safe here.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

from django.contrib.auth.models import Group, User

from facts.access import ensure_roles
from facts.models import FactCard
from facts.storage.writer import save_card

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield browser
        browser.close()


# Every page of every journey reports Content-Security-Policy violations to the test: the
# browser's `securitypolicyviolation` event (relayed by a binding, which the policy does not
# govern) and its console ("Refused to execute inline script because it violates…").
CSP_LISTENER = """
document.addEventListener("securitypolicyviolation", (e) => {
  window.reportCspViolation(
    `${e.effectiveDirective} blocked ${e.blockedURI || "inline"} on ${e.documentURI}` +
    (e.sample ? `: ${e.sample}` : "")
  );
});
"""


@pytest.fixture
def csp_violations() -> list[str]:
    return []


@pytest.fixture
def page(browser: Any, live_server: Any, csp_violations: list[str]) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=live_server.url)
    context.expose_function("reportCspViolation", lambda text: csp_violations.append(text))
    context.add_init_script(CSP_LISTENER)
    page = context.new_page()
    page.on(
        "console",
        lambda message: csp_violations.append(message.text) if "Content Security Policy" in message.text else None,
    )
    page.set_default_timeout(30_000)
    yield page
    page.wait_for_timeout(100)  # let the last events arrive
    context.close()
    assert csp_violations == [], "the dashboard broke its own Content-Security-Policy"


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"dashboard-{name}.png"), full_page=True)


def login(page: Any, role: str = "reviewer") -> None:
    ensure_roles()
    user = User.objects.create_user(f"{role}-b", "", "pw-browser")
    user.groups.add(Group.objects.get(name=role))
    page.goto("/login/")
    page.fill("input[name=username]", f"{role}-b")
    page.fill("input[name=password]", "pw-browser")
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/$"))


def test_approve_a_rejected_candidate_then_see_the_card(page: Any, make_candidate: Any) -> None:
    candidate = make_candidate(content="Prefers answers in English <b>always</b>.")
    login(page)
    shot(page, "01-overview")
    page.click("nav >> text=Review")
    page.wait_for_selector(f"#candidate-{candidate.pk}")
    shot(page, "02-review-queue")
    page.click(f"#candidate-{candidate.pk} >> text=correct…")
    page.wait_for_selector("mark")
    assert page.inner_text("mark") == "answers in English"
    shot(page, "03-candidate")
    page.fill("textarea[name=note]", "She asked for English twice.")
    page.click("form[action$='/approve/'] button[type=submit]")
    page.wait_for_selector("text=Approved")
    candidate.refresh_from_db()
    assert candidate.review_state == "approved"
    page.click("nav >> text=Facts")
    page.wait_for_selector("text=Prefers answers in English <b>always</b>.")
    shot(page, "04-facts-list")
    assert FactCard.objects.filter(content__startswith="Prefers answers in English").count() == 1
    page.goto("/preview/?user=alice&agent=coder&mode=auto")
    page.wait_for_selector("#context-text")
    # The block holds the words as written; the page shows them as text, not markup.
    assert "Prefers answers in English <b>always</b>." in page.inner_text("#context-text")
    shot(page, "05-preview-after-approval")


def test_approve_inline_from_the_queue_with_htmx(page: Any, make_candidate: Any) -> None:
    candidate = make_candidate(content="Works in Python backends.", key="work_stack")
    login(page)
    page.goto("/review/")
    row = f"#candidate-{candidate.pk}"
    page.fill(f"{row} input[name=note]", "Confirmed in the call.")
    page.click(f"{row} >> text=Approve")
    page.wait_for_selector(f"{row} >> text=approved")
    # The badge in the navigation refreshed itself from the event.
    from playwright.sync_api import expect

    # (a locator, not wait_for_function: that evaluates a string, which the CSP forbids)
    expect(page.locator("#review-badge")).to_have_text("0")
    shot(page, "06-queue-after-inline-approve")


def test_correct_a_fact_and_revert_it(page: Any, make_card: Any) -> None:
    card = save_card(make_card(content="Prefers tabs.", key="indentation"), actor="seed")
    login(page)
    page.goto(f"/facts/{card.id}/")
    shot(page, "07-fact-detail")
    page.fill("form[action$='/correct/'] textarea[name=content]", "Prefers four spaces.")
    page.fill("form[action$='/correct/'] textarea[name=reason]", "user corrected it")
    page.click("form[action$='/correct/'] button[type=submit]")
    page.wait_for_selector("text=Corrected")
    assert "Prefers four spaces." in page.inner_text("blockquote.fact-text")
    shot(page, "08-fact-corrected")
    page.click("text=Revision 1 · seed")
    page.click("text=Revert to revision 1")
    page.click("#confirm-ok")  # the confirm dialog (static/js/confirm.js)
    page.wait_for_selector("text=Reverted to revision 1.")
    assert "Prefers tabs." in page.inner_text("blockquote.fact-text")
    assert FactCard.objects.get(id=card.id).revision == 3
    shot(page, "09-fact-reverted")


def test_rebuild_the_index_and_watch_it_finish(page: Any, make_card: Any) -> None:
    for _ in range(3):
        save_card(make_card(), actor="seed")
    login(page)
    page.goto("/index/")
    shot(page, "10-index-console")
    page.click("text=Rebuild from files")
    page.wait_for_selector("#rebuild-status:text('succeeded')")
    page.wait_for_selector("text=Finished: 3 cards")
    assert page.get_attribute(".progress", "value") == "100"
    shot(page, "11-rebuild-finished")


def test_preview_a_context_whose_budget_cuts_facts(page: Any, make_card: Any) -> None:
    for n in range(12):
        save_card(
            make_card(
                content=f"Fact number {n} about the user's long-standing habits and tools.", confidence=0.7 + n / 100
            ),
            actor="seed",
        )
    login(page)
    page.goto("/preview/")
    page.fill("input[name=user]", "alice")
    page.fill("input[name=agent]", "coder")
    page.fill("input[name=budget]", "150")
    page.click("form.filters button[type=submit]")
    page.wait_for_selector("#cut-line")
    assert page.locator("table.excluded tbody tr").count() > 0
    tokens = int(page.inner_text("#total-tokens"))
    assert tokens <= 150
    shot(page, "12-preview-cut")


def test_search_playground_and_audit_pages_render(page: Any, make_card: Any) -> None:
    save_card(make_card(content="Prefers concise answers."), actor="seed")
    login(page, "admin")
    for path, name in (
        ("/search/?q=concise&user=alice&agent=coder", "13-search"),
        ("/audit/", "14-audit"),
        ("/agents/", "15-agents"),
        ("/profiles/", "16-profiles"),
        ("/conflicts/", "17-conflicts"),
    ):
        page.goto(path)
        page.wait_for_selector("h1")
        shot(page, name)


def test_edit_a_profile_section_and_see_its_history(page: Any, make_card: Any) -> None:
    save_card(make_card(user_id="alice"), actor="t")  # a person memory holds (issue 33)
    login(page)
    page.goto("/profiles/?user=alice")
    page.fill("#section-topOfMind textarea", "Learning context engineering for agents.")
    page.fill("#profile-form input[name=reason]", "from the call")
    page.click("#profile-form button[type=submit]")
    page.wait_for_selector("text=Saved Top of mind")
    assert "+Learning context engineering for agents." in page.inner_text("pre.diff")
    shot(page, "18-profile-edited")


def test_bulk_dismiss_shows_the_dry_run_first(page: Any, make_candidate: Any) -> None:
    for n in range(3):
        make_candidate(content=f"Only for this thread {n}.", key=f"t{n}", reasons=["scope_thread"])
    login(page)
    page.goto("/review/?reason=scope_thread")
    page.click("text=dismiss all matching…")
    page.wait_for_selector(".dry-run")
    assert "Dry run: 3 candidate(s)" in page.inner_text(".dry-run")
    shot(page, "19-bulk-dry-run")
    page.click("text=Dismiss 3 candidate(s)")
    page.wait_for_selector("text=Dismissed 3 candidate(s).")
    assert "Nothing waits for review" in page.inner_text("#candidate-rows")
    shot(page, "20-bulk-done")


def test_pages_carry_a_strict_content_security_policy_that_blocks_injected_code(
    page: Any, csp_violations: list[str]
) -> None:
    login(page)
    response = page.goto("/review/")
    policy = response.headers["content-security-policy"]
    for directive in ("default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"):
        assert directive in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    # what an injection would try: an inline script, an inline handler, a foreign image
    page.evaluate(
        """() => {
        const script = document.createElement("script");
        script.textContent = "window.injected = true";
        document.body.append(script);
        document.body.insertAdjacentHTML("beforeend", '<img src="http://127.0.0.2:9/x.png" onerror="window.injected = true">');
    }"""
    )
    page.wait_for_timeout(300)
    assert page.evaluate("window.injected") is None
    assert any("script-src" in v for v in csp_violations), csp_violations
    assert any("img-src" in v for v in csp_violations), csp_violations
    # htmx still works under the policy: the review badge loaded itself
    page.wait_for_selector("#review-badge", state="attached")
    csp_violations.clear()  # the expected ones; the page fixture checks that no others came


def test_a_locked_out_login_gets_the_app_page_saying_why(page: Any, settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 3  # the same path as the default 10, in fewer steps
    User.objects.create_user("rita", "", "pw-right")
    page.goto("/login/")
    for n in range(3):
        page.fill("input[name=username]", "rita")
        page.fill("input[name=password]", f"guess-{n}")
        page.click("button[type=submit]")
        page.wait_for_selector("form[action='/login/']")
    page.fill("input[name=password]", "pw-right")
    page.click("button[type=submit]")
    page.wait_for_selector("#login-locked")
    assert "even with the right password" in page.inner_text("#login-locked")
    assert page.url.endswith("/login/")
    shot(page, "21-login-locked-out")
