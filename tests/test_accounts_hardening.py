"""Accounts after the black-box attack (issue 33): one live set-password link per
account (a new one revokes the old, deactivation kills it, its expiry is stated and every
step audited), and no default admin/admin password outside DEBUG."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from facts.models import AuditEvent

pytestmark = pytest.mark.django_db

PASSWORD = "Ve7y-long-pass"


def _link_path(response: Any) -> str:
    match = re.search(r"http://testserver(/team/set-password/[^<\s]+/)", response.content.decode())
    assert match, "no set-password link on the page"
    return match.group(1)


def _set_password(path: str, password: str = PASSWORD) -> tuple[bool, str]:
    """Open the link and submit the form: (password set?, the page's text)."""
    visitor = Client()
    page = visitor.get(path, follow=True)
    if not page.context["validlink"]:
        return False, page.content.decode()
    done = visitor.post(page.redirect_chain[-1][0], {"new_password1": password, "new_password2": password})
    return done.status_code == 302, page.content.decode()


@pytest.fixture
def rita(admin_client_: Client) -> tuple[User, str]:
    created = admin_client_.post("/team/create/", {"username": "rita", "email": "", "role": "admin"})
    return User.objects.get(username="rita"), _link_path(created)


def test_a_new_link_revokes_the_earlier_one(admin_client_: Client, rita: tuple[User, str]) -> None:
    account, first = rita
    second = _link_path(admin_client_.post(f"/team/{account.pk}/link/"))
    assert second != first
    ok, page = _set_password(first, "Attacker-pass-1")
    assert not ok and "does not work any more" in page
    account.refresh_from_db()
    assert not account.check_password("Attacker-pass-1")
    assert _set_password(second)[0]
    account.refresh_from_db()
    assert account.check_password(PASSWORD)


def test_deactivating_an_account_kills_its_link_for_good(admin_client_: Client, rita: tuple[User, str]) -> None:
    account, link = rita
    admin_client_.post(f"/team/{account.pk}/active/", {"active": "0"})
    assert not _set_password(link, "Attacker-pass-1")[0]
    admin_client_.post(f"/team/{account.pk}/active/", {"active": "1"})
    ok, _ = _set_password(link, "Attacker-pass-1")
    account.refresh_from_db()
    assert not ok and not account.check_password("Attacker-pass-1") and not account.has_usable_password()


def test_a_used_link_is_dead_and_the_next_one_works(admin_client_: Client, rita: tuple[User, str]) -> None:
    _, link = rita
    assert _set_password(link)[0]
    assert not _set_password(link, "Again-pass-22")[0]


def test_the_link_and_its_page_state_when_it_expires(
    admin_client_: Client, rita: tuple[User, str], settings: Any
) -> None:
    account, _ = rita
    team = admin_client_.post(f"/team/{account.pk}/link/").content.decode()
    assert re.search(r"works until \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", team), team
    assert "earlier link" in team  # says the older one stopped working
    fresh = _link_path(admin_client_.post(f"/team/{account.pk}/link/"))
    page = Client().get(fresh, follow=True).content.decode()
    assert re.search(r"works until \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", page), page


def test_every_link_step_is_audited(admin_client_: Client, rita: tuple[User, str]) -> None:
    account, _ = rita
    second = _link_path(admin_client_.post(f"/team/{account.pk}/link/"))
    _set_password(second)
    admin_client_.post(f"/team/{account.pk}/link/")
    admin_client_.post(f"/team/{account.pk}/active/", {"active": "0"})
    changes = [e.details["change"] for e in AuditEvent.objects.filter(action="team", target="rita").order_by("pk")]
    assert changes == [
        "create",  # with its first link
        "link_revoked",
        "link",
        "password_set",
        "link",
        "link_revoked",
        "deactivate",
    ], changes
    used = AuditEvent.objects.get(action="team", target="rita", details__change="password_set")
    assert used.actor == "rita"


# --- the first administrator -------------------------------------------------------------------


@pytest.fixture
def production(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.DEBUG = False
    settings.SECRET_KEY = "a-real-secret-key-of-fifty-characters-0123456789abcdef"
    monkeypatch.delenv("ADMIN_PASSWORD", raising=False)
    settings.ADMIN_PASSWORD = ""


def test_bootstrap_outside_debug_refuses_without_a_password(production: None) -> None:
    with pytest.raises(CommandError) as caught:
        call_command("bootstrap", "--no-demo", "--no-input", stdout=io.StringIO())
    assert "ADMIN_PASSWORD" in str(caught.value) and "\n" not in str(caught.value)
    assert not User.objects.exists()


def test_bootstrap_outside_debug_takes_the_password_from_the_environment(production: None, settings: Any) -> None:
    settings.ADMIN_PASSWORD = "a-long-real-password-31"
    out = io.StringIO()
    call_command("bootstrap", "--no-demo", stdout=out)
    admin = User.objects.get(username="admin")
    assert admin.check_password("a-long-real-password-31") and admin.is_superuser
    assert "a-long-real-password-31" not in out.getvalue()


def test_bootstrap_outside_debug_refuses_the_default_or_a_weak_password(production: None, settings: Any) -> None:
    settings.ADMIN_PASSWORD = "admin"
    with pytest.raises(CommandError, match="ADMIN_PASSWORD"):
        call_command("bootstrap", "--no-demo", stdout=io.StringIO())
    assert not User.objects.exists()


def test_bootstrap_outside_debug_asks_when_it_can(production: None, monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter(["a-typed-password-42", "a-typed-password-42"])
    monkeypatch.setattr("getpass.getpass", lambda prompt="": next(answers))
    monkeypatch.setattr("sys.stdin.isatty", lambda: True, raising=False)
    call_command("bootstrap", "--no-demo", stdout=io.StringIO())
    assert User.objects.get(username="admin").check_password("a-typed-password-42")


def test_bootstrap_in_debug_keeps_the_local_admin_admin(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.DEBUG = True
    monkeypatch.delenv("ADMIN_PASSWORD", raising=False)
    settings.ADMIN_PASSWORD = ""
    out = io.StringIO()
    call_command("bootstrap", "--no-demo", stdout=out)
    assert User.objects.get(username="admin").check_password("admin")
    assert "admin" in out.getvalue() and "local use only" in out.getvalue()


def _doctor() -> tuple[int, list[dict[str, str]]]:
    out = io.StringIO()
    try:
        call_command("doctor", "--json", "--skip", "model", "--skip", "embeddings", stdout=out, stderr=io.StringIO())
        code = 0
    except CommandError as exc:
        code = exc.returncode
    return code, json.loads(out.getvalue())["findings"]


def test_doctor_fails_while_an_account_keeps_the_default_password(production: None) -> None:
    User.objects.create_superuser("admin", "", "admin")
    code, findings = _doctor()
    bad = [f for f in findings if f["check"] == "accounts"]
    assert code == 1 and bad and bad[0]["level"] == "fail" and "'admin'" in bad[0]["message"]
    admin = User.objects.get(username="admin")
    admin.set_password("now-a-real-one-77")
    admin.save()
    code, findings = _doctor()
    assert [f["level"] for f in findings if f["check"] == "accounts"] == ["ok"]
