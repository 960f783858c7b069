"""Client processes of the web concurrency test: real HTTP against a running server.

    python web_client.py setup                      → a curator account, an API key, the
                                                      counter card and profile; prints JSON
    python web_client.py api URL KEY N CLIENT       → N turns (POST /api/v1/turns and /flush
                                                      in turn) plus a /context read every
                                                      4th, with a Bearer key
    python web_client.py dashboard URL FACT N       → logs in through the login form and makes
                                                      N increments through the dashboard's
                                                      forms (CSRF token from each page),
                                                      alternating the counter card (Correct)
                                                      and the profile's workContext section
    python web_client.py wait TIMEOUT               → waits until no turn is pending or being
                                                      processed; prints the turn statuses

A dashboard increment reads the page (text and revision), posts text + 1 with that
revision and, when the answer is "changed since you opened it", reads again and
retries (counted as `retried`). An increment lost anywhere shows as a final counter
below the number of increments committed.

Prints one JSON line of counts: attempted, committed, retried, http_5xx, db_locked, …
"""

from __future__ import annotations

import html
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

USER, AGENT = "alice", "coder"
CURATOR, PASSWORD = "curator", "curator-password-1"
COUNTER = re.compile(r"Web counter: (\d+)")


def _django() -> None:
    import django

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryadmin.settings")
    django.setup()


def setup() -> None:
    _django()
    from datetime import UTC, datetime

    from django.contrib.auth.models import Group, User

    from facts.access import ensure_roles
    from facts.storage.cardfile import Card, Source
    from facts.storage.ids import new_fact_id
    from facts.storage.profilefile import Section
    from facts.storage.writer import commit_profile, save_card
    from memoryadmin.models import ApiKey

    ensure_roles()
    curator = User.objects.create_user(CURATOR, "", PASSWORD)
    curator.groups.add(Group.objects.get(name="reviewer"))
    _, raw = ApiKey.issue("web concurrency test", created_by="test")
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    card = Card(
        id=new_fact_id(), key="web_counter", category="context", confidence=0.9, user_id=USER, agent_name=AGENT,
        created_at=now, updated_at=now, source=Source(kind="manual"), content="Web counter: 0",
    )  # fmt: skip
    save_card(card, actor="setup", expected_revision=None)

    def start(profile: Any) -> Any:
        profile.set_section(
            "workContext", Section(summary="Web counter: 0", updated_at=now, source=Source(kind="manual"))
        )
        return profile

    commit_profile(USER, start, actor="setup", reason="setup")
    print(json.dumps({"fact_id": card.id, "api_key": raw}))


def wait(timeout: float) -> None:
    _django()
    from django.db.models import Count

    from facts.models import Turn

    deadline = time.monotonic() + timeout
    while True:
        counts = dict(Turn.objects.values_list("status").annotate(n=Count("id")).order_by())
        busy = counts.get(Turn.Status.PENDING, 0) + counts.get(Turn.Status.PROCESSING, 0)
        if not busy or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    print(json.dumps({"turns": counts, "waited_out": bool(busy)}))


class Stats(dict):
    def __init__(self) -> None:
        super().__init__(attempted=0, committed=0, retried=0, http_5xx=0, db_locked=0, reads=0, errors=[])

    def seen(self, response: Any) -> None:
        """Every response: a 5xx or a `database is locked` anywhere is recorded."""
        if response.status_code >= 500:
            self["http_5xx"] += 1
            self["errors"].append(f"{response.request.method} {response.request.url.path}: {response.status_code}")
        if "database is locked" in response.text:
            self["db_locked"] += 1


def api(base: str, key: str, count: int, client: str) -> None:
    import httpx

    stats = Stats()
    stats["tags"] = []
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        for n in range(count):
            tag = f"{client}x{n}"
            body = {
                "user_id": USER,
                "agent_name": AGENT,
                "thread_id": f"web-{client}-{n // 2}",
                "messages": [
                    {
                        "id": f"{tag}-u",
                        "role": "user",
                        "content": f"Note {tag}: I keep my notes in folder {tag}. I confirm the web counter.",
                    },
                    {"id": f"{tag}-a", "role": "assistant", "content": "Noted."},
                ],
            }
            path = "/api/v1/flush" if n % 2 else "/api/v1/turns"
            stats["attempted"] += 1
            for _attempt in range(5):
                try:
                    response = http.post(path, json=body)
                except httpx.TransportError as exc:
                    stats["errors"].append(f"{path}: {exc!r}")
                    stats["retried"] += 1
                    continue
                stats.seen(response)
                if response.status_code == 202:
                    stats["committed"] += 1
                    stats["tags"].append(tag)
                    break
                stats["retried"] += 1
                if response.status_code < 500:
                    stats["errors"].append(f"{path}: {response.status_code} {response.text[:200]}")
                    break
            if n % 4 == 3:
                response = http.get("/api/v1/context", params={"user_id": USER, "agent_name": AGENT})
                stats.seen(response)
                stats["reads"] += 1
                if response.status_code != 200:
                    stats["errors"].append(f"/context: {response.status_code}")
    print(json.dumps(stats))


def _field(page: str, name: str, default: str | None = None) -> str:
    """The value of a hidden input or the text of a textarea named `name`."""
    found = re.search(rf'<input[^>]*name="{re.escape(name)}"[^>]*value="([^"]*)"', page) or re.search(
        rf'<textarea[^>]*name="{re.escape(name)}"[^>]*>\s*(.*?)</textarea>', page, re.S
    )
    if found is None:
        if default is not None:
            return default
        raise AssertionError(f"no field {name!r} on the page")
    return html.unescape(found.group(1))


def _counter(text: str) -> int:
    found = COUNTER.fullmatch(text.strip())
    if found is None:
        raise AssertionError(f"not a counter: {text!r}")
    return int(found.group(1))


def dashboard(base: str, fact_id: str, count: int) -> None:
    import httpx

    stats = Stats()
    stats.update(fact_committed=0, profile_committed=0, conflicts=0, fact_conflicts=0, profile_conflicts=0)
    with httpx.Client(base_url=base, timeout=60, follow_redirects=True) as http:
        login = http.get("/login/")
        stats.seen(login)
        done = http.post(
            "/login/",
            data={"username": CURATOR, "password": PASSWORD, "csrfmiddlewaretoken": _field(login.text, "csrfmiddlewaretoken")},
        )  # fmt: skip
        stats.seen(done)
        if "sessionid" not in http.cookies:
            raise AssertionError(f"login failed: {done.status_code} {done.text[:300]}")
        for n in range(count):
            on_card = n % 2 == 0
            stats["attempted"] += 1
            for _attempt in range(50):
                page = http.get(f"/facts/{fact_id}/") if on_card else http.get("/profiles/", params={"user": USER})
                stats.seen(page)
                if page.status_code != 200:
                    stats["retried"] += 1
                    continue
                if on_card:
                    value = _counter(_field(page.text, "content"))
                    form = {
                        "csrfmiddlewaretoken": _field(page.text, "csrfmiddlewaretoken"),
                        "scope": _field(page.text, "scope"),
                        "content": f"Web counter: {value + 1}",
                        "key": "web_counter",
                        "category": "context",
                        "confidence": "0.9",
                        "reason": f"increment {n}",
                        "revision": _field(page.text, "revision", ""),
                    }
                    answer = http.post(f"/facts/{fact_id}/correct/", data=form)
                    ok, conflict = (
                        "Corrected: a new revision was written." in answer.text,
                        "Nothing was changed" in answer.text,
                    )
                else:
                    # The profile is one form (issue 37): the section named, the others left as they are.
                    value = _counter(_field(page.text, "workContext"))
                    form = {
                        "csrfmiddlewaretoken": _field(page.text, "csrfmiddlewaretoken"),
                        "user": USER,
                        "revision": _field(page.text, "revision"),
                        "reason": f"increment {n}",
                        "workContext": f"Web counter: {value + 1}",
                    }
                    answer = http.post("/profiles/edit/", data=form)
                    ok = "Saved Work context (profile revision" in answer.text
                    conflict = "the profile changed since you opened it" in answer.text
                stats.seen(answer)
                if ok:
                    stats["committed"] += 1
                    stats["fact_committed" if on_card else "profile_committed"] += 1
                    break
                stats["retried"] += 1
                if conflict:
                    stats["conflicts"] += 1
                    stats["fact_conflicts" if on_card else "profile_conflicts"] += 1
                else:
                    stats["errors"].append(f"increment {n}: {answer.status_code} {answer.text[:300]!r}")
            else:
                stats["errors"].append(f"increment {n} gave up after 50 attempts")
    print(json.dumps(stats))


def main() -> None:
    mode = sys.argv[1]
    if mode == "setup":
        setup()
    elif mode == "wait":
        wait(float(sys.argv[2]))
    elif mode == "api":
        api(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif mode == "dashboard":
        dashboard(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
