"""A real `manage.py serve` (waitress) and `manage.py db_worker` on one test's database and
MEMORY_ROOT, as `make run` starts them, with the clients the serving tests need: an
agent (API key), a curator signed in to the dashboard (CSRF tokens from each page), and
what the files hold, read straight from the disk.
"""

from __future__ import annotations

import contextlib
import html
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from facts.enums import CardStatus
from facts.storage.cardfile import Card, parse_card
from facts.storage.ids import normalize_id

from .procs import Env

ADMIN, PASSWORD = "admin", "admin-password-1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def field(page: str, name: str) -> str:
    found = re.search(rf'<input[^>]*name="{re.escape(name)}"[^>]*value="([^"]*)"', page)
    assert found is not None, f"no field {name!r} on the page"
    return html.unescape(found.group(1))


def stop(proc: subprocess.Popen[str] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=30)
            return
        except subprocess.TimeoutExpired:
            continue


class Live:
    """The server and the worker of one test (`start`, `stop`), and their clients."""

    def __init__(self, env: Env, logs: Path, **settings: str) -> None:
        self.env = Env(
            {
                **env.vars,
                "TASKS_BACKEND": "django_tasks_db.DatabaseBackend",
                "MEMORY_EXTRACTOR": "rules",
                "MEMORY_DEBOUNCE_SECONDS": "0",
                "API_USAGE_FLUSH_SECONDS": "0.2",
                "DEBUG": "0",
                "ALLOWED_HOSTS": "127.0.0.1,127.0.0.2",
                "SESSION_COOKIE_SECURE": "0",
                "CSRF_COOKIE_SECURE": "0",
                "ADMIN_PASSWORD": PASSWORD,
                "LOGIN_THROTTLE": "0",
                **settings,
            },
            env.root,
        )
        self.root = env.root
        self.logs = logs
        self.servers: list[subprocess.Popen[str]] = []
        self.worker: subprocess.Popen[str] | None = None
        self.env.manage("bootstrap", "--no-demo")
        self.key = self.env.manage("create_api_key", "agent").stdout.strip().splitlines()[-1]
        self.n = 0

    # --- processes ---------------------------------------------------------------------

    def serve(self, **settings: str) -> str:
        """Start one more server; returns its URL."""
        port = free_port()
        env = Env({**self.env.vars, **settings}, self.root)
        with (self.logs / f"serve-{port}.log").open("w") as out:
            proc = env.popen(
                "manage.py", "serve", "--listen", f"127.0.0.1:{port}",
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self.servers.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (self.logs / f"serve-{port}.log").read_text()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url + "/api/v1/openapi.json", timeout=5).status_code == 200:
                    return url
            assert time.monotonic() < deadline, "the server did not answer"
            time.sleep(0.3)

    def start_worker(self) -> None:
        with (self.logs / "worker.log").open("a") as out:
            self.worker = self.env.popen(
                "manage.py", "db_worker", "--no-reload", "--no-startup-delay", "--interval", "0.2", "--skip-checks",
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def stop_all(self) -> None:
        stop(self.worker)
        for proc in self.servers:
            stop(proc)

    def pids(self) -> list[int]:
        return [p.pid for p in [*self.servers, self.worker] if p is not None and p.poll() is None]

    def deleted_databases_held(self) -> list[str]:
        """SQLite files (and their -wal/-shm) under the root that a server or the worker
        still holds open after they were deleted: a process serving from a copy nobody
        else sees."""
        held = []
        for pid in self.pids():
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.endswith(" (deleted)") and ".sqlite3" in target and str(self.root) in target:
                        held.append(f"{pid}: {target}")
        return held

    # --- the agent ---------------------------------------------------------------------

    def api(self, url: str, key: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key or self.key}"}, timeout=120)

    def remember(self, url: str, user: str, text: str, agent: str = "coder") -> None:
        self.n += 1
        body = {
            "user_id": user,
            "agent_name": agent,
            "thread_id": f"t{self.n}",
            "messages": [
                {"id": f"m{self.n}u", "role": "user", "content": text},
                {"id": f"m{self.n}a", "role": "assistant", "content": "Noted."},
            ],
        }
        with self.api(url) as http:
            answer = http.post("/api/v1/flush", json=body)
        assert answer.status_code == 202, answer.text

    def wait_for_the_worker(self, timeout: float = 180) -> None:
        code = "from facts.models import Turn\nprint(Turn.objects.filter(status__in=['pending', 'processing']).count())"
        deadline = time.monotonic() + timeout
        while self.env.django(code).strip().splitlines()[-1] != "0":
            assert time.monotonic() < deadline, "the worker did not finish the turns"
            time.sleep(0.3)

    # --- the curator -------------------------------------------------------------------

    @contextlib.contextmanager
    def curator(self, url: str) -> Iterator[httpx.Client]:
        with httpx.Client(base_url=url, timeout=300, follow_redirects=True) as web:
            page = web.get("/login/")
            web.post(
                "/login/",
                data={"username": ADMIN, "password": PASSWORD, "csrfmiddlewaretoken": field(page.text, "csrfmiddlewaretoken")},
            )  # fmt: skip
            assert "sessionid" in web.cookies, "the curator could not sign in"
            yield web

    @staticmethod
    def post_form(web: httpx.Client, page_url: str, action: str, data: dict[str, str]) -> httpx.Response:
        page = web.get(page_url)
        assert page.status_code == 200, page.text[:300]
        return web.post(action, data={"csrfmiddlewaretoken": field(page.text, "csrfmiddlewaretoken"), **data})

    def erase_in_the_dashboard(self, url: str, user: str) -> None:
        with self.curator(url) as web:
            done = self.post_form(
                web, f"/people/user/erase/?user={user}", "/people/user/erase/", {"user": user, "confirm": user}
            )
        assert f"Erased user {user}" in done.text, done.text[:500]

    def rebuild_in_the_dashboard(self, url: str, timeout: float = 300) -> None:
        with self.curator(url) as web:
            page = self.post_form(web, "/index/", "/index/rebuild/", {"reason": "test"})
            deadline = time.monotonic() + timeout
            while "Succeeded" not in page.text and "succeeded" not in page.text:
                assert "Failed" not in page.text, page.text[:2000]
                assert time.monotonic() < deadline, "the rebuild did not finish"
                time.sleep(0.5)
                page = web.get(str(page.url))

    def correct_in_the_dashboard(self, url: str, fact_id: str, content: str) -> None:
        with self.curator(url) as web:
            page = web.get(f"/facts/{fact_id}/")
            assert page.status_code == 200, page.text[:300]
            form = {
                "csrfmiddlewaretoken": field(page.text, "csrfmiddlewaretoken"),
                "scope": field(page.text, "scope"),
                "content": content,
                "key": field(page.text, "key"),
                "category": "preference",
                "confidence": "0.9",
                "reason": "corrected in a test",
                "revision": field(page.text, "revision"),
            }
            done = web.post(f"/facts/{fact_id}/correct/", data=form)
        assert "Corrected: a new revision was written." in done.text, done.text[:1000]

    # --- the files -----------------------------------------------------------------------

    def cards(self, user: str, agent: str = "coder") -> list[Card]:
        """The active cards of user × agent, read from the files."""
        folder = self.root / "users" / normalize_id(user, what="user_id") / "agents" / agent / "facts"
        found = [parse_card(p.read_text(encoding="utf-8"), p) for p in sorted(folder.rglob("fact_*.md"))]
        return [card for card in found if card.status == CardStatus.ACTIVE]

    def users(self) -> list[str]:
        folder = self.root / "users"
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []

    def served(self, url: str, user: str, agent: str = "coder") -> dict[str, Any]:
        """What the server gives an agent of `user` now: the context's facts and, for each
        card in the files, whether a search for its words finds it."""
        with self.api(url) as http:
            context = http.get("/api/v1/context", params={"user_id": user, "agent_name": agent})
            assert context.status_code == 200, context.text
            found = {}
            for card in self.cards(user, agent):
                hits = http.get("/api/v1/search", params={"user_id": user, "agent_name": agent, "q": card.content})
                assert hits.status_code == 200, hits.text
                found[card.id] = card.id in [hit["id"] for hit in hits.json()["results"]]
        return {"context": sorted(context.json()["included"]), "found": found}

    def assert_serves_the_files(self, *urls: str, users: list[str]) -> None:
        for url in urls:
            for user in users:
                expected = sorted(card.id for card in self.cards(user))
                served = self.served(url, user)
                assert served["context"] == expected, (url, user, served, expected)
                assert all(served["found"].values()), (url, user, served)
        assert self.deleted_databases_held() == []
