"""The people whose memory is held (`/users/`, `/users/<id>/`), the pickers of user and
agent fields, the team page, and the styled error pages (DEBUG off and on)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from facts import injections
from facts.audit import record
from facts.judging.pipeline import run_turns_now
from facts.models import AuditEvent, ExtractionRun, FactCard
from tests.erasure_seed import turns

pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded() -> None:
    for t in turns():
        run_turns_now(**t)


# --- /users/ ----------------------------------------------------------------------------------


def test_it_lists_everyone_with_what_is_held_about_them(seeded: None, viewer_client: Client) -> None:
    response = viewer_client.get("/users/")

    rows = {r.user_id: r for r in response.context["page"]}
    assert set(rows) == {"xena", "yuri"}
    xena = rows["xena"]
    assert (xena.active, xena.expired, xena.pending, xena.threads) == (2, 0, 1, 2)
    assert xena.last is not None
    page = response.content.decode()
    assert 'href="/users/xena/"' in page and "UTC" in page  # times carry their zone


def test_it_searches_users_by_part_of_their_id(seeded: None, viewer_client: Client) -> None:
    response = viewer_client.get("/users/", {"q": "ur"})

    assert [r.user_id for r in response.context["page"]] == ["yuri"]
    nobody = viewer_client.get("/users/", {"q": "nobody-here"}).content.decode()
    assert "Nobody's id contains" in nobody


def test_it_sends_anonymous_visitors_to_the_login_page(seeded: None, client: Client) -> None:
    for url in ("/users/", "/users/xena/", "/pick/users/?user=x", "/team/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/")


# --- /users/<id>/ -----------------------------------------------------------------------------


def test_it_shows_a_persons_facts_by_agent_and_project_threads_runs_candidates_and_activity(
    seeded: None, viewer_client: Client
) -> None:
    record("boss", AuditEvent.Action.EXPORT, user_id="xena", target="xena")

    response = viewer_client.get("/users/xena/")

    assert response.status_code == 200
    ctx: Any = response.context
    assert [(g.agent_name, g.project_id, g.active) for g in ctx["groups"]] == [("coder", "", 2), ("", "p1", 2)]
    assert {t["thread_id"] for t in ctx["threads"]} == {"x-t1", "x-t2"}
    assert len(ctx["runs"]) == 2 and all(r["url"] for r in ctx["runs"])
    assert {c.key for c in ctx["candidates"]} >= {"deploy_tool", "maybe_later"}
    assert [e.action for e in ctx["activity"]] == ["export"]
    assert [s.name for s in ctx["sections"]] == ["topOfMind"]
    page = response.content.decode()
    assert "Forget this conversation" in page and "yuri" not in page
    assert "Erase this user" not in page and "Export…" not in page  # viewers do not see the actions


def test_it_lists_what_the_agents_were_shown_with_a_link_to_that_moment(seeded: None, viewer_client: Client) -> None:
    served_at = timezone.now().replace(microsecond=0)
    fact_ids = tuple(FactCard.objects.filter(user_id="xena").values_list("id", flat=True)[:2])
    injections.write([injections.Served(served_at, "xena", "coder", "", "context", "auto", "api", fact_ids, "x", 9)])

    response = viewer_client.get("/users/xena/")

    served = list(response.context["served"])
    assert [(e.agent_name, e.cards, e.tokens) for e in served] == [("coder", len(fact_ids), 9)]
    page = response.content.decode()
    link = f"/injections/?user=xena&amp;agent=coder&amp;at={served_at:%Y-%m-%dT%H:%M:%S}"
    assert link in page
    assert viewer_client.get(link.replace("&amp;", "&")).status_code == 200


def test_it_gives_admins_export_and_erase_for_the_person(seeded: None, admin_client_: Client) -> None:
    page = admin_client_.get("/users/xena/").content.decode()

    assert '/export/?user=xena"' in page and '/people/user/erase/?user=xena"' in page
    assert admin_client_.get("/export/", {"user": "xena"}).status_code == 200


def test_it_links_a_run_to_its_page(seeded: None, viewer_client: Client) -> None:
    run = ExtractionRun.objects.filter(user_id="xena").order_by("pk").first()
    assert run is not None

    runs = viewer_client.get("/users/xena/").context["runs"]

    url = next(r["url"] for r in runs if r["pk"] == run.pk)
    try:
        assert url == reverse("runs_detail", args=[run.pk])
    except Exception:  # the runs pages are not in this tree: the run's first candidate
        assert url.startswith("/review/")
    assert viewer_client.get(url).status_code == 200


def test_it_reaches_people_whose_id_is_unsafe_in_a_path(viewer_client: Client) -> None:
    run_turns_now(**{**turns()[1], "user_id": "a/b?c#d"})

    listing = viewer_client.get("/users/").content.decode()
    assert 'href="/users/a/b%3Fc%23d/"' in listing
    response = viewer_client.get("/users/a/b%3Fc%23d/")
    assert response.status_code == 200 and response.context["user_id"] == "a/b?c#d"


@pytest.mark.parametrize(
    "path",
    ["/users/nobody/", "/users/../../etc/passwd/", "/users/xena/../yuri/", "/users/%00/", "/users/" + "x" * 300 + "/"],
)
def test_it_answers_unknown_or_invalid_user_ids_with_the_styled_404(
    seeded: None, viewer_client: Client, path: str
) -> None:
    response = viewer_client.get(path)

    assert response.status_code == 404
    page = response.content.decode()
    assert 'id="error-page"' in page and "Not found" in page and 'class="nav"' in page
    assert "/etc/passwd" not in page and "Traceback" not in page


def test_it_forgets_a_last_conversation_and_lands_on_the_users_list(admin_client_: Client) -> None:
    run_turns_now(**turns()[1])  # xena's second thread, alone

    done = admin_client_.post(
        "/forget/", {"user": "xena", "agent": "coder", "thread": "x-t2", "confirm": "x-t2"}, follow=False
    )

    assert done.status_code == 302 and done["Location"] == "/users/"


# --- pickers ----------------------------------------------------------------------------------


def test_it_suggests_user_and_agent_ids_as_one_types(seeded: None, viewer_client: Client) -> None:
    users = viewer_client.get("/pick/users/", {"user": "X"}).content.decode()
    agents = viewer_client.get("/pick/agents/", {"agent": "cod"}).content.decode()
    searched = viewer_client.get("/pick/users/", {"q": "yu"}).content.decode()
    prefixed = viewer_client.get("/pick/agents/", {"new-agent": "zz"}).content.decode()

    assert '<option value="xena">' in users and "yuri" not in users
    assert agents.strip() == '<option value="coder"></option>'
    assert '<option value="yuri">' in searched
    assert prefixed.strip() == ""  # the agents page's "new-agent" field is read too


@pytest.mark.parametrize(
    ("url", "fields"),
    [
        ("/facts/", ("user", "agent")),
        ("/review/", ("user", "agent")),
        ("/audit/", ("user", "agent")),
        ("/preview/", ("user", "agent")),
        ("/search/", ("user", "agent")),
        ("/forget/", ("user", "agent")),
        ("/profiles/", ("user",)),
        ("/users/", ("q",)),
    ],
)
def test_it_offers_the_pickers_on_every_user_and_agent_field(viewer_client: Client, url: str, fields: Any) -> None:
    page = viewer_client.get(url).content.decode()

    for name in fields:
        endpoint = "/pick/agents/" if name.endswith("agent") else "/pick/users/"
        assert f'name="{name}"' in page
        assert f'hx-get="{endpoint}"' in page and f'list="id_{name}-options"' in page
        assert f'<datalist id="id_{name}-options">' in page


def test_it_offers_the_agent_picker_for_a_new_agents_settings(admin_client_: Client) -> None:
    page = admin_client_.get("/agents/").content.decode()

    assert 'name="new-agent"' in page and 'list="id_new-agent-options"' in page and 'hx-get="/pick/agents/"' in page


# --- /team/ -----------------------------------------------------------------------------------


def test_it_refuses_the_team_page_to_viewers_and_reviewers_with_the_styled_403(
    viewer_client: Client, reviewer_client: Client
) -> None:
    for client in (viewer_client, reviewer_client):
        response = client.get("/team/")
        assert response.status_code == 403
        assert 'id="error-page"' in response.content.decode() and 'class="nav"' in response.content.decode()
        assert client.post("/team/create/", {"username": "x", "role": "admin"}).status_code == 403
    assert not User.objects.filter(username="x").exists()


def _logs_in(username: str, password: str) -> bool:
    """A real log-in through the form (django-axes needs the request)."""
    response = Client().post("/login/", {"username": username, "password": password})
    return response.status_code == 302 and response["Location"] == "/"


def _link_path(response: Any) -> str:
    link = response.context["link"]
    assert link.startswith("http://testserver/team/set-password/")
    return link.removeprefix("http://testserver")


def test_it_creates_an_account_whose_one_time_link_sets_its_password(admin_client_: Client) -> None:
    created = admin_client_.post("/team/create/", {"username": "rita", "email": "", "role": "reviewer"})

    assert created.status_code == 200
    rita = User.objects.get(username="rita")
    assert not rita.has_usable_password() and rita.groups.get().name == "reviewer"
    event = AuditEvent.objects.get(action="team")
    assert (event.actor, event.target, event.details) == ("boss", "rita", {"change": "create", "role": "reviewer"})

    visitor = Client()
    form_page = visitor.get(_link_path(created), follow=True)  # Django moves the token into the session
    assert form_page.context["validlink"]
    done = visitor.post(
        form_page.redirect_chain[-1][0], {"new_password1": "Ve7y-long-pass", "new_password2": "Ve7y-long-pass"}
    )
    assert done.status_code == 302
    assert _logs_in("rita", "Ve7y-long-pass")
    again = Client().get(_link_path(created), follow=True)
    assert not again.context["validlink"]  # one time only
    assert "does not work any more" in again.content.decode()


def test_it_refuses_a_taken_username(admin_client_: Client, viewer: User) -> None:
    response = admin_client_.post("/team/create/", {"username": "Viewer", "role": "admin"})

    assert response.status_code == 400 and "already exists" in response.content.decode()


def test_it_changes_a_role_and_deactivates_an_account_with_audit(admin_client_: Client, viewer: User) -> None:
    admin_client_.post(f"/team/{viewer.pk}/role/", {"role": "reviewer"})
    viewer.refresh_from_db()
    assert [g.name for g in viewer.groups.all()] == ["reviewer"]

    session = Client()
    session.force_login(viewer)
    assert session.get("/users/").status_code == 200
    admin_client_.post(f"/team/{viewer.pk}/active/", {"active": "0"})
    viewer.refresh_from_db()
    assert not viewer.is_active
    assert session.get("/users/").status_code == 302  # the open session ends
    assert not _logs_in("viewer", "pw-viewer")

    changes = [e.details for e in AuditEvent.objects.filter(action="team").order_by("pk")]
    assert changes == [{"change": "role", "role": "reviewer", "before": "viewer"}, {"change": "deactivate"}]


def test_it_keeps_an_admin_from_changing_their_own_account_or_a_superuser(
    admin_client_: Client, admin_user: User
) -> None:
    root = User.objects.create_superuser("root", "", "pw-root")

    assert admin_client_.post(f"/team/{admin_user.pk}/active/", {"active": "0"}).status_code == 403
    assert admin_client_.post(f"/team/{admin_user.pk}/role/", {"role": "viewer"}).status_code == 403
    assert admin_client_.post(f"/team/{root.pk}/active/", {"active": "0"}).status_code == 403
    admin_user.refresh_from_db()
    root.refresh_from_db()
    assert admin_user.is_active and root.is_active and not AuditEvent.objects.filter(action="team").exists()


# --- error pages ------------------------------------------------------------------------------


@pytest.mark.parametrize("debug", [False, True])
def test_it_styles_404_for_unknown_urls_and_missing_objects_in_both_modes(
    settings: Any, viewer_client: Client, debug: bool
) -> None:
    settings.DEBUG = debug

    for url in ("/no-such-page/", "/facts/fact_000000000000/", "/review/999999/"):
        response = viewer_client.get(url)
        page = response.content.decode()
        assert response.status_code == 404, url
        assert 'id="error-page"' in page and 'class="nav"' in page, url
        assert "URLconf" not in page and "settings.py" not in page


@pytest.mark.parametrize("debug", [False, True])
def test_it_styles_403_in_both_modes(settings: Any, viewer_client: Client, debug: bool) -> None:
    settings.DEBUG = debug

    response = viewer_client.get("/export/", {"user": "xena"})

    assert response.status_code == 403 and 'id="error-page"' in response.content.decode()


def test_it_answers_a_form_without_its_csrf_token_with_the_styled_403_and_changes_nothing(
    viewer: User,
) -> None:
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(viewer)
    before = AuditEvent.objects.count()

    response = browser.post(reverse("team"), {"username": "mallory", "role": "admin"})

    page = response.content.decode()
    assert response.status_code == 403 and 'id="error-page"' in page and "Reload the page" in page
    assert not User.objects.filter(username="mallory").exists() and AuditEvent.objects.count() == before


def test_it_keeps_the_api_404_its_own(settings: Any, client: Client) -> None:
    settings.DEBUG = True

    response = client.get("/api/v1/no-such-endpoint")

    assert response.status_code == 404 and 'id="error-page"' not in response.content.decode()


def test_it_redirects_a_url_missing_its_slash_before_answering_404(settings: Any, viewer_client: Client) -> None:
    settings.DEBUG = True

    assert viewer_client.get("/users")["Location"] == "/users/"


def test_it_styles_a_server_error(settings: Any, viewer: User, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.DEBUG = False

    def boom(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("broken")

    monkeypatch.setattr("dashboard.views.users._user_rows", boom)
    client = Client(raise_request_exception=False)
    client.force_login(viewer)
    response = client.get("/users/")

    assert response.status_code == 500
    page = response.content.decode()
    assert 'id="error-page"' in page and 'class="nav"' in page and "broken" not in page
