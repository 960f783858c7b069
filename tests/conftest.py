"""Shared fixtures: a throwaway MEMORY_ROOT per test, card factories, users by role."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import global_settings
from django.contrib.auth.models import Group, User
from django.test import Client

from facts.access import ensure_roles
from facts.storage.cardfile import Card, Source
from facts.storage.ids import new_fact_id
from facts.storage.store import Store

FIXED_NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def reindex_quietly(*flags: str) -> None:
    """``manage.py reindex`` with its output swallowed."""
    from django.core.management import call_command

    call_command("reindex", "--no-progress", *flags, stdout=StringIO(), stderr=StringIO())


def reindex_check() -> tuple[int, dict]:
    """``manage.py reindex --check --json``: (exit code, report)."""
    from django.core.management import call_command
    from django.core.management.base import CommandError

    out = StringIO()
    try:
        call_command("reindex", "--check", "--json", stdout=out)
        code = 0
    except CommandError as exc:
        code = exc.returncode
    return code, json.loads(out.getvalue())


@pytest.fixture(autouse=True)
def memory_root(tmp_path: Path, settings: Any) -> Iterator[Path]:
    """Every test gets its own empty store (and its empty index); nothing touches var/.
    A missing index is rebuilt in the background (`retrieval.indexdb`): reads wait for
    it here rather than answer 503 on a loaded machine, and no rebuild outlives its test."""
    from memoryadmin import api_service
    from retrieval import indexconn

    root = tmp_path / "memory"
    root.mkdir()
    settings.MEMORY_ROOT = root
    settings.MEMORY_INDEX_WAIT_SECONDS = 120.0
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"}}
    api_service._known_agents.clear()  # agents another test made known
    indexconn.reset()
    # An empty index for the empty store, as a fresh install's first read makes it: the
    # tests' first writes then go to it, not to a rebuild in the background.
    indexconn.connection()
    yield root
    indexconn.wait_for_rebuilds()
    indexconn.reset()


@pytest.fixture(autouse=True)
def lexical_search_by_default(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Embeddings off unless a test turns them on (the `embeddings` fixture): loading
    the model costs a second and 150 MB per process, and most tests assert lexical
    ranking. Subprocesses a test starts inherit the environment variable."""
    settings.MEMORY_EMBEDDINGS = False
    monkeypatch.setenv("MEMORY_EMBEDDINGS", "off")


@pytest.fixture
def embeddings(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hybrid search on, as in production."""
    settings.MEMORY_EMBEDDINGS = True
    settings.MEMORY_EMBEDDING_THREADS = 1
    monkeypatch.setenv("MEMORY_EMBEDDINGS", "on")


@pytest.fixture(autouse=True)
def outbox_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`MemoryClient`'s durable outbox in the test's folder, never in the real home."""
    path = tmp_path / "agent-state" / "outbox.sqlite3"
    monkeypatch.setenv("MEMORY_OUTBOX_PATH", str(path))
    return path


@pytest.fixture
def store(memory_root: Path) -> Store:
    return Store(memory_root, lock_timeout=10)


_counter = itertools.count(1)


@pytest.fixture
def make_card() -> Callable[..., Card]:
    def make(**overrides: Any) -> Card:
        n = next(_counter)
        data: dict[str, Any] = {
            "id": new_fact_id(),
            "key": f"key_{n}",
            "category": "preference",
            "confidence": 0.9,
            "user_id": "alice",
            "agent_name": "coder",
            "created_at": FIXED_NOW,
            "updated_at": FIXED_NOW,
            "source": Source(kind="manual"),
            "content": f"User fact number {n}.",
        }
        data.update(overrides)
        return Card(**data)

    return make


def _user(username: str, role: str | None, superuser: bool = False) -> User:
    ensure_roles()
    if superuser:
        user = User.objects.create_superuser(username, "", "pw-" + username)
    else:
        user = User.objects.create_user(username, "", "pw-" + username)
    if role:
        user.groups.add(Group.objects.get(name=role))
    return user


@pytest.fixture
def viewer(db: None) -> User:
    return _user("viewer", "viewer")


@pytest.fixture
def reviewer(db: None) -> User:
    return _user("reviewer", "reviewer")


@pytest.fixture
def admin_user(db: None) -> User:
    return _user("boss", "admin")


@pytest.fixture
def viewer_client(viewer: User) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


@pytest.fixture
def reviewer_client(reviewer: User) -> Client:
    client = Client()
    client.force_login(reviewer)
    return client


@pytest.fixture
def admin_client_(admin_user: User) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


# Reliability harness: a migrated database shared by subprocesses (tests/helpers_reliability).
from tests.helpers_reliability.procs import _template_db, proc_env  # noqa: E402, F401


# Write path: a local OpenAI-compatible stub the real ChatOpenAI client talks to.
@pytest.fixture
def openai_stub(settings: Any) -> Any:
    from tests.openai_stub import running_stub

    for stub in running_stub():
        settings.MEMORY_LLM_BASE_URL = stub.url
        settings.MEMORY_LLM_API_KEY = "test-key"
        settings.MEMORY_LLM_MODEL = "stub-model"
        settings.MEMORY_LLM_MAX_RETRIES = 0
        settings.MEMORY_LLM_TIMEOUT = 5.0
        yield stub


# Dashboard: candidates as the gate leaves them, without running extraction.
@pytest.fixture
def make_candidate(db: None) -> Callable[..., Any]:
    from facts.models import Candidate, ExtractionRun

    def make(**overrides: Any) -> Candidate:
        rows = overrides.pop(
            "rows",
            [
                {"id": "m1", "role": "user", "content": "I always want answers in English, please."},
                {"id": "m2", "role": "assistant", "content": "Understood."},
            ],
        )
        run = ExtractionRun.objects.create(
            user_id=overrides.get("user_id", "alice"),
            agent_name=overrides.get("agent_name", "coder"),
            thread_id=overrides.get("thread_id", "t-1"),
            filtered_rows=rows,
            status=ExtractionRun.Status.SUCCEEDED,
        )
        data: dict[str, Any] = {
            "run": run,
            "kind": Candidate.Kind.FACT,
            "user_id": "alice",
            "agent_name": "coder",
            "thread_id": "t-1",
            "key": "response_language",
            "content": "Prefers answers in English.",
            "category": "preference",
            "scope": "user",
            "durability": "durable",
            "authority": "descriptive",
            "confidence": 0.5,
            "evidence_message_id": "m1",
            "evidence_text": "answers in English",
            "verdict": Candidate.Verdict.REJECTED,
            "reasons": ["low_confidence"],
            "review_state": Candidate.ReviewState.PENDING,
        }
        data.update(overrides)
        return Candidate.objects.create(**data)

    return make


# Dashboard: the overview caches its charts and counts; no test may see another's.
@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(autouse=True)
def _inline_api_usage_counters(settings: Any) -> None:
    """The API's usage counters are written inline in tests, never by the background
    flusher thread (which would write outside the test's transaction)."""
    settings.API_USAGE_FLUSH_SECONDS = 0


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    """MD5 for the passwords tests create: every user fixture hashes one, and the
    production hasher (PBKDF2, 1,000,000 rounds) took 0.3-0.4 s per password on this
    machine. The default hashers stay listed so that a password hashed by a
    subprocess (the reliability tests' servers) is still checked here."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher", *global_settings.PASSWORD_HASHERS]
