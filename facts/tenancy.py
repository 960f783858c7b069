"""Tenants and the projects they own: who may read and write a project's shared memory.

A **tenant** is the part of a user id before its first ``:`` (``MEMORY_TENANT_SEPARATOR``):
``acme:ann`` belongs to ``acme``; an id without one (``li.wei``) belongs to no tenant —
the deployment's own users. API keys limited to ``acme:*`` therefore act for acme's
users only, and through them reach acme's projects only.

A **project** belongs to one tenant, or is shared:

1. its settings file ``projects/<folder>/project.json`` decides when there is one —
   written by an admin (the Projects page, `set_tenancy`) or by the upgrade to this
   version for projects that one tenant alone had written (migration 0010);
2. otherwise the tenant of its own id: ``acme:shop`` is acme's, ``shop-api`` belongs to
   no tenant. A tenant cannot claim a plain name first and lock its owners out.

A user may read and write a project of their own tenant, or a shared one (every tenant
reads and writes it). Every door applies `check`: the JSON API and MCP (403
``project_not_allowed``), the in-process client, ``ingest``, the worker (a turn stored
before the wall existed is extracted without the project) and import. The file is the
truth, like every other memory file: a rebuild or another machine reads the same one;
each process keeps the parsed file while its size, mtime and inode stay the same.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from facts.intake.sanitize import has_control
from facts.intake.turns import TurnRejected
from facts.storage.atomic import atomic_write
from facts.storage.errors import InvalidId
from facts.storage.fileread import read_bounded
from facts.storage.ids import normalize_id
from facts.storage.store import Bucket, Store, get_store

SETTINGS_FILE = "project.json"
MAX_TENANT_CHARS = 100
# A tenant nothing matches: what an unreadable settings file gives (closed, not open).
UNREADABLE = "\x00unreadable"


def separator() -> str:
    return str(getattr(settings, "MEMORY_TENANT_SEPARATOR", ":"))


def tenant_of(identifier: str) -> str:
    """``acme`` for ``acme:ann`` (or the project ``acme:shop``); ``""`` without a separator."""
    sep = separator()
    if not sep or sep not in identifier:
        return ""
    return identifier.split(sep, 1)[0]


def label(tenant: str) -> str:
    return tenant if tenant else "no tenant"


@dataclass(frozen=True)
class Tenancy:
    """Who owns a project, and how that was decided (`source`: ``prefix`` when only its
    id says so, ``setting`` for its settings file, ``unreadable`` for a broken one)."""

    project_id: str
    tenant: str
    shared: bool = False
    source: str = "prefix"
    set_by: str = ""
    set_at: str = ""

    def admits(self, user_id: str) -> bool:
        return self.shared or (self.source != "unreadable" and tenant_of(user_id) == self.tenant)

    @property
    def label(self) -> str:
        if self.source == "unreadable":
            return "unreadable settings"
        return "shared" if self.shared else label(self.tenant)


class ProjectNotAllowed(TurnRejected):
    """The user's tenant may not use this project (the API answers 403)."""

    def __init__(self, user_id: str, project_id: str) -> None:
        super().__init__(
            "project_id",
            f"the project {project_id!r} belongs to another tenant: {user_id!r} may not read or write it",
            code="project_not_allowed",
        )
        self.user_id = user_id
        self.project_id = project_id


def check_tenant(value: str) -> str:
    """A tenant name as an admin typed it (``""``: no tenant), or ValueError."""
    value = value.strip()
    if len(value) > MAX_TENANT_CHARS:
        raise ValueError(f"a tenant name has at most {MAX_TENANT_CHARS} characters")
    if has_control(value):
        raise ValueError("a tenant name must not contain control characters")
    sep = separator()
    if sep and sep in value:
        raise ValueError(f"a tenant name must not contain {sep!r}: write 'acme' for the users 'acme{sep}…'")
    return value


# --- the settings file ---------------------------------------------------------------------


def settings_path(project_id: str, root: Path | str | None = None) -> Path:
    base = Path(root) if root is not None else Path(settings.MEMORY_ROOT)
    return base / "projects" / normalize_id(project_id, what="project_id") / SETTINGS_FILE


_cache: dict[str, tuple[tuple[int, int, int], Tenancy]] = {}
_cache_lock = threading.Lock()


def tenancy_of(project_id: str, *, root: Path | str | None = None) -> Tenancy:
    """The project's owner: its settings file, else the tenant of its id."""
    try:
        path = settings_path(project_id, root)
    except InvalidId:
        return Tenancy(project_id, tenant_of(project_id))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return Tenancy(project_id, tenant_of(project_id))
    except OSError:
        return Tenancy(project_id, UNREADABLE, source="unreadable")
    key = (st.st_mtime_ns, st.st_size, st.st_ino)
    with _cache_lock:
        hit = _cache.get(str(path))
    if hit is not None and hit[0] == key:
        return hit[1]
    found = _read(project_id, path)
    with _cache_lock:
        if len(_cache) > 10_000:
            _cache.clear()
        _cache[str(path)] = (key, found)
    return found


def _read(project_id: str, path: Path) -> Tenancy:
    try:
        # Bounded, like every memory file: a FIFO or a hung mount in its place must not
        # hold every request for the project (ReadRefused is an OSError: closed).
        data = json.loads(read_bounded(path).decode("utf-8"))
        tenant = data.get("tenant", "")
        shared = data.get("shared", False)
        if not isinstance(tenant, str) or not isinstance(shared, bool):
            raise ValueError("tenant must be a string and shared true or false")
        return Tenancy(
            project_id,
            check_tenant(tenant),
            shared,
            "setting",
            str(data.get("set_by", ""))[:150],
            str(data.get("set_at", ""))[:40],
        )
    except (OSError, ValueError, RecursionError, AttributeError):
        # Closed, not open: a broken file must not hand the project to everyone.
        return Tenancy(project_id, UNREADABLE, source="unreadable")


def write_settings(root: Path | str, project_id: str, *, tenant: str, shared: bool, set_by: str, set_at: str) -> None:
    """The settings file, written atomically (the caller holds the project's lock)."""
    body = {"project_id": project_id, "tenant": tenant, "shared": shared, "set_by": set_by, "set_at": set_at}
    atomic_write(settings_path(project_id, root), json.dumps(body, ensure_ascii=False, indent=2) + "\n")


# --- the check every door makes ---------------------------------------------------------------


def may_use(user_id: str, project_id: str | None) -> bool:
    return not project_id or tenancy_of(project_id).admits(user_id)


def check(user_id: str, project_id: str | None) -> None:
    """Raise `ProjectNotAllowed` unless `user_id` may read and write `project_id`."""
    if project_id and not tenancy_of(project_id).admits(user_id):
        raise ProjectNotAllowed(user_id, project_id)


def set_tenancy(
    project_id: str, *, tenant: str, shared: bool, actor: str, reason: str = "", store: Store | None = None
) -> Tenancy:
    """Give a project to a tenant (``""``: no tenant) or share it; audited with what it was."""
    from django.utils import timezone

    from facts import audit
    from facts.models import AuditEvent

    tenant = check_tenant(tenant)
    normalize_id(project_id, what="project_id")
    if has_control(project_id):
        raise ValueError("a project id must not contain control characters")
    store = store or get_store()
    before = tenancy_of(project_id, root=store.root)
    at = timezone.now().strftime("%Y-%m-%dT%H:%M:%SZ")
    with store.lock(Bucket(project_id=project_id)):
        write_settings(store.root, project_id, tenant=tenant, shared=shared, set_by=actor[:150], set_at=at)
    audit.record(
        actor[:150],
        AuditEvent.Action.PROJECT,
        target=project_id[:200],
        reason=reason,
        tenant=tenant,
        shared=shared,
        before={"tenant": before.tenant if before.source != "unreadable" else None, "shared": before.shared},
    )
    return tenancy_of(project_id, root=store.root)


# --- every project, for the dashboard's Projects page -----------------------------------------


@dataclass
class ProjectRow:
    """One project: who owns it, what it holds, and whose conversations wrote it."""

    tenancy: Tenancy
    active_cards: int = 0
    cards: int = 0
    users: int = 0
    writer_tenants: tuple[str, ...] = ()

    @property
    def project_id(self) -> str:
        return self.tenancy.project_id

    @property
    def several_tenants(self) -> bool:
        return len(self.writer_tenants) > 1

    @property
    def foreign_writers(self) -> list[str]:
        """Tenants whose users wrote it although it is not theirs (before the walls)."""
        if self.tenancy.shared:
            return []
        return [label(t) for t in self.writer_tenants if t != self.tenancy.tenant]


def project_rows(query: str = "", *, root: Path | str | None = None) -> list[ProjectRow]:
    """Every project memory knows of — with cards, named by turns, or given a settings
    file — sorted by id, in four grouped queries and one folder listing."""
    from django.db.models import Count, Q

    from facts.models import ExtractionRun, FactCard, Turn

    rows: dict[str, ProjectRow] = {}

    def row(project_id: str) -> ProjectRow:
        if project_id not in rows:
            rows[project_id] = ProjectRow(tenancy_of(project_id, root=root))
        return rows[project_id]

    match = Q(project_id__icontains=query) if query else Q()
    for r in (
        FactCard.objects.filter(match, user_id="")
        .exclude(project_id="")
        .values("project_id")
        .annotate(n=Count("id"), active=Count("id", filter=Q(status="active")))
        .order_by()
    ):
        target = row(r["project_id"])
        target.cards, target.active_cards = r["n"], r["active"]
    writers: dict[str, set[str]] = {}
    for model in (Turn, ExtractionRun):
        for project_id, user_id in (
            model.objects.filter(match).exclude(project_id="").values_list("project_id", "user_id").distinct()
        ):
            writers.setdefault(project_id, set()).add(user_id)
    for project_id, users in writers.items():
        target = row(project_id)
        target.users = len(users)
        target.writer_tenants = tuple(sorted({tenant_of(u) for u in users}))
    base = (Path(root) if root is not None else Path(settings.MEMORY_ROOT)) / "projects"
    if base.is_dir():
        for folder in sorted(base.iterdir()):
            path = folder / SETTINGS_FILE
            if not path.is_file():
                continue
            try:
                project_id = json.loads(read_bounded(path).decode("utf-8")).get("project_id")
            except (OSError, ValueError, RecursionError, AttributeError):
                continue
            if isinstance(project_id, str) and project_id and (not query or query.lower() in project_id.lower()):
                row(project_id)
    return [rows[k] for k in sorted(rows)]
