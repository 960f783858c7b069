"""The no-model quick start (docs/extraction.md, "Memory with no model server"): a real gunicorn and a real `db_worker`,
no MEMORY_LLM_BASE_URL. A turn with an explicit preference posted through the API shows
up in the context (API and the dashboard's context preview) within seconds, extracted
by the built-in rules."""

from __future__ import annotations

import html
import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from .helpers_reliability.procs import Env, report_numbers
from .test_concurrency_web import _free_port, _stop, _wait_ready

DEADLINE_S = 60  # the fact appears in ~2 s on a quiet machine; this is for a loaded one

SETUP = """
from django.contrib.auth.models import User
from memoryadmin.models import ApiKey
User.objects.create_superuser("boss", "", "pw-boss")
print(ApiKey.issue("quick start", created_by="test")[1])
"""
STATE = """
import json
from facts.models import ExtractionRun, FactCard, Turn
turn, run = Turn.objects.get(), ExtractionRun.objects.get()
print(json.dumps({
    "received_to_run_start_s": round((run.started_at - turn.received_at).total_seconds(), 2),
    "run_ms": round(run.duration_ms), "rules_ms": round(run.model_ms, 2),
    "runs": list(ExtractionRun.objects.values_list("status", "extractor", "model_name")),
    "facts": sorted(FactCard.objects.filter(status="active").values_list("key", flat=True)),
}))
"""


def _field(page: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert found, f"no {name} on the page"
    return found.group(1)


@pytest.mark.slow
def test_with_no_model_a_posted_preference_reaches_the_context_within_seconds(proc_env: Env, tmp_path: Path) -> None:
    import httpx

    vars_ = {k: v for k, v in proc_env.vars.items() if k not in ("MEMORY_LLM_BASE_URL", "MEMORY_EXTRACTOR")}
    env = Env(
        dict(
            vars_,
            TASKS_BACKEND="django_tasks_db.DatabaseBackend",
            MEMORY_DEBOUNCE_SECONDS="1",
            DEBUG="0",
            ALLOWED_HOSTS="127.0.0.1",
            SESSION_COOKIE_SECURE="0",
            CSRF_COOKIE_SECURE="0",
        ),
        proc_env.root,
    )
    key = env.django(SETUP).strip().splitlines()[-1]
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    logs = {name: tmp_path / f"{name}.log" for name in ("gunicorn", "worker")}
    with logs["gunicorn"].open("w") as out:
        server = env.popen(
            "-m", "gunicorn", "memoryadmin.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "1",
            "--threads", "2", stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    with logs["worker"].open("w") as out:
        worker = env.popen(
            "manage.py", "db_worker", "--no-reload", "--no-startup-delay", "--interval", "0.2", "--skip-checks",
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        _wait_ready(url, server)
        auth = {"Authorization": f"Bearer {key}"}
        turn = {
            "user_id": "alice",
            "agent_name": "coder",
            "thread_id": "t1",
            "messages": [
                {"id": "m1", "role": "user", "content": "我主要做 Python 后端开发，平时请用中文解释技术问题。"},
                {"id": "m2", "role": "assistant", "content": "好的。"},
                {
                    "id": "m3",
                    "role": "user",
                    "content": "Also, I prefer concise answers. Just for this one, skip the tests.",
                },
            ],
        }
        posted = time.monotonic()
        answer = httpx.post(url + "/api/v1/turns", json=turn, headers=auth, timeout=30)
        assert answer.status_code == 202, answer.text
        params = {"user_id": "alice", "agent_name": "coder", "mode": "auto"}
        text = ""
        while time.monotonic() - posted < DEADLINE_S:
            text = httpx.get(url + "/api/v1/context", params=params, headers=auth, timeout=30).json()["text"]
            if "concise" in text:
                break
            time.sleep(0.2)
        seconds = round(time.monotonic() - posted, 2)
        assert "User prefers concise answers." in text, f"not in the context after {seconds} s: {text!r}"
        assert "用户希望平时用中文解释技术问题" in text and "用户主要做 Python 后端开发" in text
        assert "skip the tests" not in text  # a one-off request is not memory

        # the dashboard's context preview shows the same block
        with httpx.Client(base_url=url, timeout=30) as browser:
            login = browser.get("/login/")
            token = _field(login.text, "csrfmiddlewaretoken")
            done = browser.post(
                "/login/", data={"username": "boss", "password": "pw-boss", "csrfmiddlewaretoken": token}
            )
            assert done.status_code in (200, 302), done.text[:300]
            preview = browser.get("/preview/", params={"user": "alice", "agent": "coder", "mode": "auto"})
            assert preview.status_code == 200
            assert "User prefers concise answers." in html.unescape(preview.text)
            overview = html.unescape(browser.get("/").text)
            assert "Extractor: <strong>rules (built-in, no model; no MEMORY_LLM_BASE_URL)</strong>" in overview
    finally:
        _stop(worker)
        _stop(server, group=True)
    state = json.loads(env.django(STATE).strip().splitlines()[-1])
    report_numbers("rules-quick-start", seconds_to_context=seconds, **state)
    assert state["runs"] == [["succeeded", "rules", "rules-v1"]]
    assert sorted(state["facts"]) == ["primary_stack", "response_language", "response_length"]
    for name, path in logs.items():
        assert "Traceback" not in path.read_text(errors="replace"), name
