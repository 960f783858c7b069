"""Password guessing on the login form: after 10 failures for one username within 15
minutes, that username's logins are refused, the right password included, for a
cool-down, with a page that says so."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "the-right-password"


@pytest.fixture(autouse=True)
def fast_hashing(settings: Any) -> None:
    # the real hasher costs most of a second per login on a loaded machine; the count
    # and the lockout do not depend on it
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def rita(db: None) -> User:
    return User.objects.create_user("rita", "", PASSWORD)


def _login(client: Client, username: str, password: str) -> Any:
    return client.post("/login/", {"username": username, "password": password, "next": "/"})


def _guess(times: int, username: str = "rita") -> list[int]:
    """Wrong passwords, each from a fresh client (no session or cookie in common)."""
    return [_login(Client(), username, f"guess-{n}").status_code for n in range(times)]


def _logged_in(client: Client) -> bool:
    return client.get("/").status_code == 200


def test_it_refuses_the_right_password_after_ten_failures(rita: User) -> None:
    assert _guess(9) == [200] * 9  # the form again, with "Please enter a correct username…"
    assert _guess(1) == [429]  # the tenth failure locks the username
    client = Client()
    response = _login(client, "rita", PASSWORD)
    assert response.status_code == 429
    assert not _logged_in(client)
    page = response.content.decode()
    assert "Too many failed log-ins for this username" in page
    assert "refused for 15 minutes, even with the right password" in page
    # the app's own page: its stylesheet and a login form to come back to, not a bare text
    assert "css/app" in page and 'name="password"' in page and 'value="rita"' in page


def test_nine_failures_still_let_the_right_password_in_and_clear_the_count(rita: User) -> None:
    _guess(9)
    client = Client()
    assert _login(client, "rita", PASSWORD)["Location"] == "/"
    assert _logged_in(client)
    assert not AccessAttempt.objects.filter(username="rita").exists()
    assert _guess(9) == [200] * 9  # counting starts again from zero


def test_the_lockout_is_per_username(rita: User) -> None:
    User.objects.create_user("sam", "", PASSWORD)
    _guess(10)
    client = Client()
    assert _login(client, "sam", PASSWORD).status_code == 302
    assert _logged_in(client)


def test_unknown_usernames_are_throttled_too(db: None) -> None:
    assert _guess(11, username="nobody")[-2:] == [429, 429]


def test_it_lets_the_user_in_again_after_the_cool_down(rita: User) -> None:
    _guess(10)
    # 16 minutes later: the last failure is older than the 15-minute cool-down
    AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.get().attempt_time - timedelta(minutes=16))
    client = Client()
    assert _login(client, "rita", PASSWORD).status_code == 302
    assert _logged_in(client)


def test_refused_attempts_do_not_extend_the_cool_down(rita: User) -> None:
    _guess(10)
    locked_at = AccessAttempt.objects.get().attempt_time
    assert _guess(3) == [429] * 3
    assert AccessAttempt.objects.get().attempt_time == locked_at


def test_failures_spaced_more_than_the_window_apart_never_lock(rita: User) -> None:
    for _ in range(12):
        _guess(1)
        # each failure is 16 minutes after the one before
        AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.get().attempt_time - timedelta(minutes=16))
    client = Client()
    assert _login(client, "rita", PASSWORD).status_code == 302


def test_an_administrator_lifts_a_lockout_at_once(rita: User) -> None:
    _guess(10)
    call_command("axes_reset_username", "rita")
    assert _login(Client(), "rita", PASSWORD).status_code == 302


def test_the_limit_and_the_cool_down_are_settings(rita: User, settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(minutes=5)
    assert _guess(3) == [200, 200, 429]
    assert "refused for 5 minutes" in _login(Client(), "rita", PASSWORD).content.decode()


def test_the_admin_login_is_throttled_by_the_same_count(rita: User) -> None:
    rita.is_staff = rita.is_superuser = True
    rita.save()
    _guess(10)
    response = Client().post("/admin/login/", {"username": "rita", "password": PASSWORD})
    assert response.status_code == 429


@pytest.mark.slow
def test_the_count_is_shared_by_every_server_process(proc_env: Any) -> None:
    """Two `manage.py serve` processes (the production recipe runs one per core behind a
    proxy), the guesses alternating between them: the 11th attempt is refused by both."""
    import re
    import subprocess

    import httpx

    from .helpers_reliability.procs import Env
    from .test_server_slow_clients import _free_port, _stop_group, _wait_ready

    plain_http = {"SESSION_COOKIE_SECURE": "0", "CSRF_COOKIE_SECURE": "0"}
    env = Env(dict(proc_env.vars, DEBUG="0", ALLOWED_HOSTS="127.0.0.1", LOG_LEVEL="ERROR", **plain_http), proc_env.root)
    env.django(f"from django.contrib.auth.models import User; User.objects.create_user('rita', '', {PASSWORD!r})")
    urls = [f"http://127.0.0.1:{_free_port()}" for _ in range(2)]
    servers = [
        env.popen("manage.py", "serve", "--listen", url.removeprefix("http://"), stdout=subprocess.DEVNULL,
                  stderr=subprocess.DEVNULL, start_new_session=True)
        for url in urls
    ]  # fmt: skip

    def attempt(url: str, password: str) -> int:
        with httpx.Client(base_url=url, timeout=30) as client:
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', client.get("/login/").text)
            assert token is not None
            data = {"username": "rita", "password": password, "csrfmiddlewaretoken": token.group(1), "next": "/"}
            return client.post("/login/", data=data).status_code

    try:
        for url, server in zip(urls, servers, strict=True):
            _wait_ready(url, server)
        statuses = [attempt(urls[n % 2], f"guess-{n}") for n in range(10)]
        assert statuses == [200] * 9 + [429]
        assert [attempt(url, PASSWORD) for url in urls] == [429, 429]
    finally:
        for server in servers:
            _stop_group(server)
