"""The dashboard shell: login required, real counts on the overview."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from facts.enums import CardStatus
from facts.storage.writer import save_card

pytestmark = pytest.mark.django_db

# The end of a set-password link is reached before logging in (its start has arguments).
PUBLIC = {"login", "logout", "team_password_set"}


def _dashboard_urls() -> list[str]:
    """Every named dashboard URL without arguments (API and admin have their own auth)."""
    found = []

    def walk(patterns, prefix=""):
        for p in patterns:
            if isinstance(p, URLResolver):
                route = str(p.pattern)
                if route.startswith(("api/", "admin/")):
                    continue
                walk(p.url_patterns, prefix + route)
            elif isinstance(p, URLPattern) and p.name and p.name not in PUBLIC and "<" not in str(p.pattern):
                found.append("/" + prefix + str(p.pattern))

    walk(get_resolver().url_patterns)
    return found


def test_the_login_page_is_served() -> None:
    response = Client().get("/login/")
    assert response.status_code == 200
    assert b"csrfmiddlewaretoken" in response.content


@pytest.mark.parametrize("url", _dashboard_urls())
def test_every_dashboard_page_requires_login(url: str) -> None:
    response = Client().get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_logging_in_leads_to_the_overview(viewer) -> None:
    client = Client()
    response = client.post("/login/", {"username": "viewer", "password": "pw-viewer"}, follow=True)
    assert response.redirect_chain[-1][0] == "/"
    assert b"Overview" in response.content


def test_the_overview_shows_real_counts(viewer_client: Client, make_card) -> None:
    save_card(make_card(user_id="alice", agent_name="coder"), actor="t")
    save_card(make_card(user_id="bob", agent_name="writer"), actor="t")
    save_card(make_card(user_id="bob", agent_name="writer", status=CardStatus.EXPIRED), actor="t")
    save_card(make_card(user_id=None, agent_name=None, project_id="shop"), actor="t")
    response = viewer_client.get("/")
    counts = response.context["counts"]
    assert (counts["users"], counts["agents"], counts["projects"]) == (2, 2, 1)
    assert (counts["active"], counts["expired"], counts["superseded"]) == (3, 1, 0)
