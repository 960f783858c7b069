"""Tenant walls around project memory (issue 33): a project belongs to a tenant (the
part of its id before ':' unless an admin or the upgrade said otherwise) or is shared,
and a user may only read and write the projects of their own tenant and the shared
ones — on the JSON API, MCP over HTTP and stdio, the in-process client and `ingest`.

The attack these tests replay: a key limited to ``acme:*`` named li.wei's project
``shop-api`` and was served its facts (context, search, MCP), and flushed "This repo uses
MongoDB 3.0" into it, which li.wei's agent was then served.
"""

from __future__ import annotations

import asyncio
import importlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from mcp import Client as McpClient

from facts import tenancy
from facts.models import AuditEvent, FactCard, Turn
from facts.storage.store import Store
from facts.storage.writer import save_card
from memoryadmin.client import LocalMemory
from memoryadmin.mcp_server import Identity, build_server
from memoryadmin.memory_protocol import MemoryContext, MemoryRejected
from memoryadmin.models import ApiKey
from retrieval.render import render_context
from tests.factories import fact_candidate
from tests.openai_stub import OpenAIStub

pytestmark = pytest.mark.django_db

LI = "li.wei"
ANN = "acme:ann"
SECRET = "The shop-api repo deploys with the blue-green script on Fridays."


@pytest.fixture(autouse=True)
def _rules_by_default(settings: Any) -> None:
    settings.MEMORY_LLM_BASE_URL = ""
    settings.MEMORY_EXTRACTOR = ""


@pytest.fixture
def shop_api(make_card: Callable[..., Any]) -> Any:
    """li.wei's team project, built from li.wei's conversations (no tenant prefix)."""
    Turn.objects.create(
        user_id=LI, agent_name="coder", thread_id="t0", project_id="shop-api", messages=[], status="done"
    )
    return save_card(make_card(user_id=None, agent_name=None, project_id="shop-api", content=SECRET), actor="t")


@pytest.fixture
def acme_key() -> str:
    return ApiKey.issue("acme agents", allowed_users=["acme:*"])[1]


@pytest.fixture
def li_key() -> str:
    return ApiKey.issue("li's agents", allowed_users=[LI])[1]


@pytest.fixture
def open_key() -> str:
    return ApiKey.issue("operator")[1]


def api(key: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}")


def turn(user_id: str, project_id: str, text: str = "This repo uses MongoDB 3.0.") -> str:
    return json.dumps(
        {
            "user_id": user_id,
            "agent_name": "coder",
            "thread_id": "t-evil",
            "project_id": project_id,
            "messages": [{"id": "m1", "role": "user", "content": text}],
        }
    )


def four(client: Client, user_id: str, project_id: str) -> list[tuple[int, str]]:
    scope = {"user_id": user_id, "agent_name": "coder", "project_id": project_id}
    answers = [
        client.post("/api/v1/turns", turn(user_id, project_id), content_type="application/json"),
        client.post("/api/v1/flush", turn(user_id, project_id), content_type="application/json"),
        client.get("/api/v1/context", scope),
        client.get("/api/v1/search", {**scope, "q": "blue-green deploys"}),
    ]
    return [(r.status_code, r.json().get("error", {}).get("code", "")) for r in answers]


# --- the JSON API -----------------------------------------------------------------------


def test_a_tenant_key_cannot_read_or_write_another_tenants_project(shop_api: Any, acme_key: str) -> None:
    answers = four(api(acme_key), ANN, "shop-api")
    assert answers == [(403, "project_not_allowed")] * 4
    assert not Turn.objects.filter(user_id=ANN).exists()
    message = (
        api(acme_key)
        .get("/api/v1/context", {"user_id": ANN, "agent_name": "coder", "project_id": "shop-api"})
        .json()["error"]
    )
    assert "shop-api" in message["message"] and SECRET not in json.dumps(message)


def test_the_flushed_lie_never_reaches_li_weis_agent(shop_api: Any, acme_key: str, li_key: str) -> None:
    api(acme_key).post("/api/v1/flush", turn(ANN, "shop-api"), content_type="application/json")
    served = api(li_key).get("/api/v1/context", {"user_id": LI, "agent_name": "coder", "project_id": "shop-api"})
    assert served.status_code == 200
    assert SECRET in served.json()["text"] and "MongoDB" not in served.json()["text"]
    assert not FactCard.objects.filter(project_id="shop-api", content__icontains="mongodb").exists()


def test_a_key_without_user_limits_cannot_cross_the_wall_either(shop_api: Any, open_key: str) -> None:
    assert four(api(open_key), ANN, "shop-api") == [(403, "project_not_allowed")] * 4


def test_the_owning_tenant_keeps_reading_and_writing_its_project(shop_api: Any, li_key: str) -> None:
    answers = four(api(li_key), LI, "shop-api")
    assert [status for status, _ in answers] == [202, 202, 200, 200]


def test_a_tenant_uses_projects_named_with_its_prefix(acme_key: str, make_card: Callable[..., Any]) -> None:
    save_card(
        make_card(user_id=None, agent_name=None, project_id="acme:shop", content="Acme ships on Tuesdays."), actor="t"
    )
    assert [status for status, _ in four(api(acme_key), ANN, "acme:shop")] == [202, 202, 200, 200]
    li = Client(HTTP_AUTHORIZATION=f"Bearer {ApiKey.issue('li')[1]}")
    assert four(li, LI, "acme:shop") == [(403, "project_not_allowed")] * 4


def test_a_shared_project_is_read_and_written_by_every_tenant(shop_api: Any, acme_key: str, li_key: str) -> None:
    tenancy.set_tenancy("shop-api", tenant="", shared=True, actor="boss")
    assert [status for status, _ in four(api(acme_key), ANN, "shop-api")] == [202, 202, 200, 200]
    assert [status for status, _ in four(api(li_key), LI, "shop-api")] == [202, 202, 200, 200]


def test_an_admin_can_give_a_project_to_a_tenant(shop_api: Any, acme_key: str, li_key: str, memory_root: Path) -> None:
    tenancy.set_tenancy("shop-api", tenant="acme", shared=False, actor="boss")
    assert [status for status, _ in four(api(acme_key), ANN, "shop-api")] == [202, 202, 200, 200]
    assert four(api(li_key), LI, "shop-api") == [(403, "project_not_allowed")] * 4
    # The file is the truth: it is what a rebuild or another machine reads.
    data = json.loads((memory_root / "projects" / "shop-api" / "project.json").read_text())
    assert data["tenant"] == "acme" and data["shared"] is False


def test_a_user_outside_the_key_is_refused_before_the_project_is_looked_at(shop_api: Any, acme_key: str) -> None:
    assert four(api(acme_key), LI, "shop-api") == [(403, "user_not_allowed")] * 4


# --- MCP over HTTP and stdio ---------------------------------------------------------------


def mcp_post(key: str, user: str, project: str | None) -> Any:
    headers: dict[str, Any] = {
        "HTTP_AUTHORIZATION": f"Bearer {key}",
        "HTTP_X_MEMORY_USER": user,
        "HTTP_X_MEMORY_AGENT": "coder",
    }
    if project:
        headers["HTTP_X_MEMORY_PROJECT"] = project
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    return Client().post(
        "/mcp", json.dumps(body), content_type="application/json", HTTP_ACCEPT="application/json, text/event-stream",
        **headers,
    )  # fmt: skip


def test_mcp_over_http_refuses_another_tenants_project(shop_api: Any, acme_key: str) -> None:
    response = mcp_post(acme_key, ANN, "shop-api")
    assert response.status_code == 403
    assert response.json()["error"]["data"]["code"] == "project_not_allowed"


def test_mcp_stdio_refuses_to_start_on_another_tenants_project(shop_api: Any) -> None:
    with pytest.raises(CommandError, match=r"project_not_allowed|belongs to another tenant"):
        call_command("mcp", "--user", ANN, "--project", "shop-api", stdout=io.StringIO())


def _call(identity: Identity, name: str, args: dict[str, Any]) -> Any:
    async def main() -> Any:
        async with McpClient(build_server(lambda ctx: identity)) as client:
            return await client.call_tool(name, args)

    return asyncio.run(main())


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("memory_search", {"query": "blue-green"}),
        ("memory_context", {}),
        ("memory_list", {}),
        ("memory_remember", {"text": "This repo uses MongoDB 3.0."}),
    ],
)
def test_every_mcp_tool_refuses_another_tenants_project(shop_api: Any, tool: str, args: dict[str, Any]) -> None:
    result = _call(Identity(ANN, "coder", "shop-api", actor="mcp:stdio"), tool, args)
    assert result.is_error
    text = result.content[0].text
    assert "shop-api" in text and SECRET not in text
    assert not Turn.objects.filter(user_id=ANN).exists()


# --- the in-process client (LangChain middleware) and ingest --------------------------------


def test_the_in_process_client_is_refused_like_the_api(shop_api: Any) -> None:
    ctx = MemoryContext(user_id=ANN, agent_name="coder", project_id="shop-api", thread_id="t1")
    memory = LocalMemory()
    with pytest.raises(MemoryRejected, match="shop-api"):
        memory.context(ctx)
    with pytest.raises(MemoryRejected, match="shop-api"):
        memory.search(ctx, "blue-green")
    with pytest.raises(MemoryRejected, match="shop-api"):
        memory.record_turn(ctx, [{"id": "m1", "role": "user", "content": "This repo uses MongoDB 3.0."}])
    assert not Turn.objects.filter(user_id=ANN).exists()


def test_ingest_refuses_a_line_for_another_tenants_project(shop_api: Any, tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    path.write_text(turn(ANN, "shop-api") + "\n" + turn(LI, "shop-api", "I deploy shop-api myself.") + "\n")
    err = io.StringIO()
    with pytest.raises(CommandError):
        call_command("ingest", str(path), stdout=io.StringIO(), stderr=err)
    assert "line 1" in err.getvalue() and "shop-api" in err.getvalue()
    assert not Turn.objects.filter(user_id=ANN).exists()
    assert Turn.objects.filter(user_id=LI, thread_id="t-evil").exists()


def test_a_turn_queued_before_the_wall_never_writes_into_the_project(
    shop_api: Any, openai_stub: OpenAIStub, settings: Any
) -> None:
    """A turn stored before the upgrade is extracted without the project it may not use."""
    from facts.tasks import process_thread

    settings.MEMORY_EXTRACTOR = "llm"
    text = "This repo uses MongoDB 3.0."
    openai_stub.reply_tool_call(
        {
            "facts": [
                fact_candidate(
                    key="database", content=text, scope="project", category="context",
                    evidence_message_id="m1", evidence_text="MongoDB 3.0",
                )
            ],
            "summaries": [],
            "confirmations": [],
        }
    )  # fmt: skip
    Turn.objects.create(
        user_id=ANN,
        agent_name="coder",
        thread_id="old",
        project_id="shop-api",
        messages=[{"type": "human", "data": {"id": "m1", "content": text, "type": "human"}}],
        message_ids=["m1"],
        flush=True,
    )
    process_thread(ANN, "coder", "old", force=True)
    assert openai_stub.requests, "the turn was extracted"
    assert not FactCard.objects.filter(project_id="shop-api", content__icontains="mongodb").exists()
    assert "MongoDB" not in render_context(user_id=LI, agent_name="coder", project_id="shop-api").text


# --- the dashboard: who owns a project, and changing it --------------------------------------


def _row(page: str, project_id: str) -> str:
    """The Projects page's table row of one project (its cells after the id)."""
    return page.split(f">{project_id}</a></td>", 1)[1].split("</tr>", 1)[0]


def test_the_projects_page_shows_each_projects_tenant(
    shop_api: Any, viewer_client: Client, make_card: Callable[..., Any]
) -> None:
    save_card(make_card(user_id=None, agent_name=None, project_id="acme:shop", content="Acme ships."), actor="t")
    page = viewer_client.get("/projects/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "shop-api" in text and "acme:shop" in text
    assert "acme" in _row(text, "acme:shop") and "no tenant" in _row(text, "shop-api")
    assert "Set" not in text  # viewers see the tenants, only admins change them


def test_an_admin_sets_a_projects_tenant_on_the_projects_page(
    shop_api: Any, admin_client_: Client, acme_key: str
) -> None:
    response = admin_client_.post("/projects/settings/", {"project": "shop-api", "tenant": "acme", "shared": ""})
    assert response.status_code == 302
    assert tenancy.tenancy_of("shop-api").tenant == "acme"
    event = AuditEvent.objects.get(action=AuditEvent.Action.PROJECT)
    assert event.target == "shop-api" and event.details["tenant"] == "acme" and event.details["before"]["tenant"] == ""
    assert [status for status, _ in four(api(acme_key), ANN, "shop-api")] == [202, 202, 200, 200]
    shared = admin_client_.post("/projects/settings/", {"project": "shop-api", "tenant": "acme", "shared": "on"})
    assert shared.status_code == 302 and tenancy.tenancy_of("shop-api").shared


@pytest.mark.parametrize(
    ("tenant", "message"),
    [("ac:me", "must not contain"), ("acme\x1b", "control"), ("x" * 101, "at most 100")],
)
def test_a_bad_tenant_name_is_refused_and_changes_nothing(
    shop_api: Any, admin_client_: Client, tenant: str, message: str
) -> None:
    response = admin_client_.post("/projects/settings/", {"project": "shop-api", "tenant": tenant})
    assert response.status_code == 400 and message in response.content.decode()
    assert tenancy.tenancy_of("shop-api").tenant == ""


def test_only_admins_change_a_projects_tenant(shop_api: Any, reviewer_client: Client) -> None:
    response = reviewer_client.post("/projects/settings/", {"project": "shop-api", "tenant": "acme"})
    assert response.status_code == 403
    assert tenancy.tenancy_of("shop-api").tenant == ""


# --- the upgrade: existing projects keep their facts and their users ---------------------------


def _migrate_existing_projects(store: Store) -> None:
    module = importlib.import_module("facts.migrations.0012_project_tenancy")
    from django.apps import apps

    module.assign_tenants_from_history(apps, None)


def test_the_upgrade_gives_a_one_tenant_project_to_that_tenant(
    store: Store, make_card: Callable[..., Any], acme_key: str, li_key: str
) -> None:
    Turn.objects.create(user_id=ANN, agent_name="coder", thread_id="t", project_id="legacy", messages=[])
    Turn.objects.create(user_id="acme:bo", agent_name="coder", thread_id="t", project_id="legacy", messages=[])
    card = save_card(
        make_card(user_id=None, agent_name=None, project_id="legacy", content="Legacy uses Perl 5."), actor="t"
    )
    _migrate_existing_projects(store)
    assert tenancy.tenancy_of("legacy").tenant == "acme"
    served = api(acme_key).get("/api/v1/context", {"user_id": ANN, "agent_name": "coder", "project_id": "legacy"})
    assert served.status_code == 200 and card.id in served.json()["included"]
    assert four(api(li_key), LI, "legacy") == [(403, "project_not_allowed")] * 4


def test_the_upgrade_leaves_a_project_written_by_several_tenants_to_its_prefix_and_flags_it(
    shop_api: Any, store: Store, viewer_client: Client
) -> None:
    Turn.objects.create(user_id=ANN, agent_name="coder", thread_id="t", project_id="shop-api", messages=[])
    _migrate_existing_projects(store)
    assert tenancy.tenancy_of("shop-api").tenant == "" and not tenancy.tenancy_of("shop-api").shared
    assert FactCard.objects.filter(id=shop_api.id).exists()  # no project fact lost
    assert "several tenants" in _row(viewer_client.get("/projects/").content.decode(), "shop-api")


def test_the_context_preview_does_not_show_a_project_the_agents_are_refused(
    shop_api: Any, viewer_client: Client
) -> None:
    page = viewer_client.get("/preview/", {"user": ANN, "agent": "coder", "project": "shop-api"})
    text = page.content.decode()
    assert "project_not_allowed" in text and SECRET not in text
    allowed = viewer_client.get("/preview/", {"user": LI, "agent": "coder", "project": "shop-api"})
    assert SECRET in allowed.content.decode()


def test_a_settings_file_that_never_answers_closes_the_project_at_once(settings: Any, tmp_path: Path) -> None:
    # A FIFO (or a hung mount) in place of project.json is read within the file bound,
    # like every memory file: the project is closed, and no request waits on it.
    import os
    import time

    settings.MEMORY_ROOT = tmp_path
    settings.MEMORY_FILE_READ_TIMEOUT = 1
    path = tenancy.settings_path("acme:fifo")
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    started = time.monotonic()
    found = tenancy.tenancy_of("acme:fifo")
    assert found.source == "unreadable" and not found.admits(ANN)
    assert time.monotonic() - started < 5
