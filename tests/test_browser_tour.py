"""Every dashboard page in a real browser as an admin, with DEBUG off and with it on: each
answers 200 with the navigation and its zone-stamped footer, none shows a traceback or
breaks the Content-Security-Policy, and an unknown URL or a missing object is the styled
404 in both modes. Screenshots go to test-artifacts/ (tour-debug-on-*.png, …-off-*.png)."""

from __future__ import annotations

from typing import Any

import pytest

from facts.judging.pipeline import run_turns_now
from facts.models import Candidate, ExtractionRun, FactCard
from tests.erasure_seed import turns
from tests.test_browser_dashboard import ARTIFACTS, browser, csp_violations, login, page  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _pages() -> list[str]:
    fact = FactCard.objects.filter(user_id="xena").order_by("pk").first()
    run = ExtractionRun.objects.order_by("pk").first()
    candidate = Candidate.objects.order_by("pk").first()
    assert fact and run and candidate, "the seed gives every kind of object a page"
    return [
        "/",
        "/users/",
        "/users/xena/",
        "/runs/",
        f"/runs/{run.pk}/",
        "/review/?state=all",
        f"/review/{candidate.pk}/",
        "/facts/",
        f"/facts/{fact.pk}/",
        "/conflicts/",
        "/profiles/?user=xena",
        "/preview/?user=xena&agent=coder",
        "/search/?user=xena&agent=coder&q=deploy",
        "/index/",
        "/turns/",
        "/gate/",
        "/gate/backtest/",
        "/injections/?user=xena&agent=coder",
        "/audit/",
        "/agents/",
        "/team/",
        "/export/?user=xena",
    ]


@pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on"])
def test_every_page_renders_styled_in_both_debug_modes(page: Any, settings: Any, debug: bool) -> None:  # noqa: F811
    settings.DEBUG = debug
    for t in turns():
        run_turns_now(**t)
    login(page, "admin")
    ARTIFACTS.mkdir(exist_ok=True)
    mode = "on" if debug else "off"

    for number, url in enumerate(_pages()):
        response = page.goto(url)
        assert response is not None and response.status == 200, url
        text = page.inner_text("body")
        assert page.is_visible("nav >> text=Users") and not page.is_visible("#error-page"), url
        assert "Traceback" not in text and "UTC" in page.inner_text("footer"), url
        page.screenshot(path=str(ARTIFACTS / f"tour-debug-{mode}-{number:02d}.png"), full_page=True)

    for missing in ("/no-such-page/", "/facts/no-such-fact/", "/runs/999999/", "/users/nobody/"):
        response = page.goto(missing)
        assert response is not None and response.status == 404, missing
        assert page.is_visible("#error-page") and page.is_visible("nav >> text=Users"), missing
        assert "URLconf" not in page.inner_text("body"), missing  # not Django's technical page
    page.screenshot(path=str(ARTIFACTS / f"tour-debug-{mode}-404.png"), full_page=True)
