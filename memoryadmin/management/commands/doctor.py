"""`manage.py doctor`: is this installation safe and healthy? Exit 1 on any problem.

Checks: settings (DEBUG off with the default SECRET_KEY, hosts, memory settings),
accounts (none may keep the default password ``admin``; tenant walls on while keys are
limited to users), migrations, MEMORY_ROOT (exists, writable, not open to other users, no stale temp
files), the files vs mirror vs index vs vectors (drift, unreadable cards), the
embedding model (loads and embeds, when MEMORY_EMBEDDINGS is on), turns pending for
too long or stuck in processing past their claim's lease, and the model endpoint (a quick HTTP request to MEMORY_LLM_BASE_URL).
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

DEFAULT_SECRET_PREFIX = "insecure-local-only-key"
CHECKS = ("settings", "accounts", "database", "files", "machines", "index", "embeddings", "turns", "model")
# Accounts whose password is compared with the default (each comparison costs one hash).
MAX_ACCOUNTS_CHECKED = 500
STALE_TEMP_SECONDS = 600


@dataclass
class Finding:
    check: str
    level: str  # ok | warn | fail
    message: str


class Doctor:
    def __init__(self, *, pending_minutes: float, http_timeout: float) -> None:
        self.findings: list[Finding] = []
        self.pending_minutes = pending_minutes
        self.http_timeout = http_timeout

    def ok(self, check: str, message: str) -> None:
        self.findings.append(Finding(check, "ok", message))

    def warn(self, check: str, message: str) -> None:
        self.findings.append(Finding(check, "warn", message))

    def fail(self, check: str, message: str) -> None:
        self.findings.append(Finding(check, "fail", message))

    # --- checks ---------------------------------------------------------------------

    def check_settings(self) -> None:
        before = len(self.findings)
        default_key = settings.SECRET_KEY.startswith(DEFAULT_SECRET_PREFIX) or len(settings.SECRET_KEY) < 32
        if not settings.DEBUG and default_key:
            self.fail("settings", "DEBUG is off but SECRET_KEY is the built-in default (or short): set SECRET_KEY")
        elif default_key:
            self.warn("settings", "SECRET_KEY is the built-in default: fine locally, never in production")
        if not settings.DEBUG and "*" in settings.ALLOWED_HOSTS:
            self.fail("settings", "DEBUG is off and ALLOWED_HOSTS contains '*': list the real host names")
        if settings.DEBUG:
            self.warn("settings", "DEBUG is on: set DEBUG=0 in production")
        if settings.MEMORY_REVIEW_MODE not in ("auto", "manual"):
            self.fail("settings", f"MEMORY_REVIEW_MODE is {settings.MEMORY_REVIEW_MODE!r}: use 'auto' or 'manual'")
        threshold = settings.MEMORY_CONFIDENCE_THRESHOLD
        if not (0 <= threshold <= 1):
            self.fail("settings", f"MEMORY_CONFIDENCE_THRESHOLD is {threshold}: it must be between 0 and 1")
        budget, correction = settings.MEMORY_CONTEXT_BUDGET, settings.MEMORY_CORRECTION_BUDGET
        if budget <= 0 or correction < 0 or correction > budget:
            self.fail(
                "settings",
                f"budgets are {budget}/{correction}: need MEMORY_CONTEXT_BUDGET > 0 and "
                "0 ≤ MEMORY_CORRECTION_BUDGET ≤ MEMORY_CONTEXT_BUDGET",
            )
        for name in (
            "API_MAX_BODY_BYTES",
            "API_MAX_MESSAGES",
            "API_MAX_MESSAGE_CHARS",
            "MEMORY_MAX_CANDIDATES_PER_RUN",
            "MEMORY_CLAIM_LEASE_SECONDS",
        ):
            if getattr(settings, name, 1) <= 0:
                self.fail("settings", f"{name} must be positive")
        if not any(f.check == "settings" and f.level == "fail" for f in self.findings[before:]):
            self.ok("settings", "settings are consistent")

    def check_accounts(self) -> None:
        """No dashboard account may keep bootstrap's local default password (`admin`):
        it is the first thing anyone tries. A failure in DEBUG too: the port may be open."""
        from django.contrib.auth import get_user_model
        from django.contrib.auth.hashers import check_password

        from memoryadmin.management.commands.bootstrap import DEFAULT_PASSWORD

        User = get_user_model()
        people = User.objects.filter(is_active=True).order_by("-is_superuser", "pk")[:MAX_ACCOUNTS_CHECKED]
        # hashers.check_password, not User.check_password: a check must not rewrite a hash.
        weak = [
            u.get_username() for u in people if u.has_usable_password() and check_password(DEFAULT_PASSWORD, u.password)
        ]
        if weak:
            names = ", ".join(repr(name) for name in weak[:5])
            self.fail(
                "accounts",
                f"{len(weak)} account(s) still have the default password {DEFAULT_PASSWORD!r}: {names}; "
                f"change it (`manage.py changepassword {weak[0]}`)",
            )
        else:
            self.ok("accounts", "no account has the default password")
        from facts import tenancy
        from memoryadmin.models import ApiKey

        if not tenancy.separator() and ApiKey.objects.exclude(allowed_users=[]).exists():
            self.warn(
                "accounts",
                "API keys are limited to users (tenants) but MEMORY_TENANT_SEPARATOR is empty: "
                "project memory is not walled between tenants",
            )

    def check_database(self) -> None:
        try:
            executor = MigrationExecutor(connection)
            plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
        except Exception as exc:  # the database itself is unreachable
            self.fail("database", f"cannot reach the database: {exc}")
            return
        if plan:
            self.fail("database", f"{len(plan)} migrations not applied: run `manage.py migrate`")
        else:
            self.ok("database", f"{connection.vendor} database, migrations applied")

    def check_files(self) -> None:
        root = Path(settings.MEMORY_ROOT)
        if not root.is_dir():
            self.fail("files", f"MEMORY_ROOT {root} does not exist or is not a folder")
            return
        if not os.access(root, os.W_OK | os.X_OK):
            self.fail("files", f"MEMORY_ROOT {root} is not writable by this process (uid {os.getuid()})")
            return
        problems = 0
        # the search index and the API's counters hold memory text and key ids too
        for folder in [root, *(root / name for name in ("users", "projects", ".locks", ".retrieval", ".api"))]:
            if not folder.exists():
                continue
            mode = folder.stat().st_mode
            if mode & stat.S_IWOTH:
                self.fail("files", f"{folder} is writable by every user on the machine (chmod o-w)")
                problems += 1
            elif mode & (stat.S_IROTH | stat.S_IXOTH):
                self.warn(
                    "files", f"{folder} can be read by every user on the machine: memory is personal (chmod o-rx)"
                )
        now = time.time()
        stale = [p for p in root.rglob(".tmp-*") if now - p.stat().st_mtime > STALE_TEMP_SECONDS]
        if stale:
            self.warn(
                "files",
                f"{len(stale)} temporary files left by interrupted writes (never read as cards; safe to delete), "
                f"e.g. {stale[0].relative_to(root)}",
            )
        if not problems:
            self.ok("files", f"MEMORY_ROOT {root} is writable")

    def check_machines(self) -> None:
        """Several machines (docs/scaling.md): the root's locks must hold across
        machines, and the search index must be machine-local."""
        from memoryadmin import sharedroot
        from retrieval.indexpaths import index_path

        root = Path(settings.MEMORY_ROOT)
        if not root.is_dir():
            return  # check_files has said so
        if not sharedroot.flock_enforced(root / ".locks"):
            self.fail("machines", f"flock locks under {root} are not enforced: two writers could write one bucket")
            return
        mount = sharedroot.mount_of(root)
        problem = sharedroot.lock_problem(mount) if mount else None
        if problem:
            getattr(self, problem[0])("machines", f"MEMORY_ROOT {root}: {problem[1]}")
        shared = connection.vendor == "postgresql"
        index_dir = index_path().parent
        index_mount = sharedroot.mount_of(index_dir if index_dir.exists() else index_dir.parent)
        why = sharedroot.index_is_shared(index_dir, root, index_mount)
        if why and index_mount is not None and index_mount.network:
            self.fail("machines", f"the search index {index_dir} is not machine-local ({why}): set MEMORY_INDEX_DIR")
        elif why and shared:
            # PostgreSQL with MEMORY_ROOT on a local disk: one machine, which is fine (a
            # root shared by several machines is a network mount, refused just above).
            self.ok(
                "machines",
                "one machine: the search index is under MEMORY_ROOT on a local disk; before adding a "
                "second machine, put MEMORY_ROOT on shared storage and set MEMORY_INDEX_DIR (docs/scaling.md)",
            )
        elif shared and not settings.MEMORY_CHANGE_LOG:
            self.warn("machines", "MEMORY_CHANGE_LOG is off: other machines' indexes will not see this one's writes")
        elif index_dir.exists() and index_dir.stat().st_mode & (stat.S_IROTH | stat.S_IWOTH | stat.S_IXOTH):
            # outside MEMORY_ROOT, so check_files does not look at it; it holds memory text
            self.warn(
                "machines", f"the search index {index_dir} can be read by every user on the machine (chmod o-rwx)"
            )
        elif not problem:
            kind = f"{mount.fstype} at {mount.point}" if mount else "unknown file system"
            self.ok("machines", f"flock enforced on MEMORY_ROOT ({kind}); index at {index_dir}")

    def check_index(self) -> None:
        from memoryadmin import rebuild
        from retrieval.indexconn import status

        state = status(rebuild=False)
        if state["state"] != "ready":
            # Agents are answered 503 until a rebuild publishes a new index.
            self.fail(
                "index",
                f"{state['message']}"
                if state["rebuilding"]
                else f"the search index is {state['state']}: "
                "readers answer 503; it is rebuilt at the next read, or run `manage.py reindex`",
            )
        report = rebuild.check()
        for name, drift in report.parts.items():
            if drift.clean:
                self.ok("index", f"{name} in step with the files")
                continue
            counts = ", ".join(f"{len(getattr(drift, k))} {k}" for k in ("missing", "extra", "changed"))
            self.fail("index", f"{name} has drifted from the files ({counts}): run `manage.py reindex`")
        if report.unreadable:
            path, problem = report.unreadable[0]
            self.fail("index", f"{len(report.unreadable)} memory files cannot be read, e.g. {path}: {problem}")

    def check_embeddings(self) -> None:
        """The sentence-vector model loads and embeds (hybrid search, issue 19)."""
        from retrieval import embedding

        if not embedding.enabled():
            self.ok("embeddings", "MEMORY_EMBEDDINGS is off: search is lexical only")
            return
        started = time.monotonic()
        try:
            dims = embedding.embed(["doctor: 时区 time zone"]).shape[1]
        except embedding.EmbeddingUnavailable as exc:
            self.fail("embeddings", f"{exc}: install requirements.txt, or set MEMORY_EMBEDDINGS=off")
            return
        path = (
            "queries use the one-text path"
            if embedding.query_path() == "single"
            else "queries use the package's batch path (the one-text path did not match it: see the log)"
        )
        pieces = (
            "texts are cut by the sentencepiece library"
            if embedding.pieces_path() == "library"
            else "texts are cut by the package's own tokenizer (slower, ~65 MB more: see the log)"
        )
        self.ok(
            "embeddings",
            f"model {embedding.MODEL_ID} loads and embeds ({dims} dimensions, {time.monotonic() - started:.1f}s); "
            f"{path}; {pieces}",
        )

    def check_turns(self) -> None:
        from facts.models import Turn

        cutoff = timezone.now() - timedelta(minutes=self.pending_minutes)
        old = Turn.objects.filter(status=Turn.Status.PENDING, received_at__lt=cutoff)
        count = old.count()
        if count:
            oldest = old.order_by("received_at").values_list("received_at", flat=True).first()
            self.fail(
                "turns",
                f"{count} turns pending for more than {self.pending_minutes:g} minutes (oldest {oldest:%Y-%m-%d %H:%M} "
                "UTC): is `manage.py db_worker` running, is the model reachable?",
            )
        else:
            self.ok("turns", f"no turn pending for more than {self.pending_minutes:g} minutes")
        from facts.intake import claims

        stuck = claims.stuck_turns()
        count = stuck.count()
        if count:
            oldest = stuck.order_by("received_at").values_list("received_at", flat=True).first()
            self.fail(
                "turns",
                f"{count} turns stuck in processing past their lease (oldest received {oldest:%Y-%m-%d %H:%M} UTC): "
                "the worker holding them stopped; a running `manage.py db_worker` takes them over within a "
                "quarter lease, or run `manage.py process_turns --retry-failed`",
            )
        runs = claims.stuck_runs().count()
        if runs:
            self.fail(
                "turns",
                f"{runs} extraction runs stuck in running past their lease: their worker stopped; "
                "a running `manage.py db_worker` closes them as failed",
            )
        from facts.models import Erasure

        # An erasure killed half-way keeps refusing the user's turns until it is rerun.
        unfinished = Erasure.objects.filter(
            status=Erasure.Status.RUNNING, started_at__lt=timezone.now() - timedelta(minutes=1)
        )
        for erasure in unfinished.order_by("pk")[:5]:
            self.fail(
                "turns",
                f"erasure #{erasure.pk} unfinished since {erasure.started_at:%Y-%m-%d %H:%M} UTC, the user's turns are "
                f"refused: run `manage.py erase --user {erasure.user_id!r} ... --yes` again to finish it",
            )
        failed = Turn.objects.filter(status=Turn.Status.FAILED).count()
        if failed:
            self.warn("turns", f"{failed} turns failed extraction: `manage.py process_turns --retry-failed`")

    def check_model(self) -> None:
        # The same probe as the overview's model notice (one rule, one place).
        from facts.judging.extraction import model_status

        status = model_status(self.http_timeout)
        if status.state == "down":
            self.fail("model", status.message)
        elif status.state == "rules":
            self.ok("model", f"{status.message} Set MEMORY_LLM_BASE_URL to use a model.")
        else:
            self.ok("model", status.message)


class Command(BaseCommand):
    help = "Check settings, database, MEMORY_ROOT, drift, pending turns and the model endpoint; exit 1 on problems."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--skip", action="append", default=[], choices=CHECKS, help="Leave a check out.")
        parser.add_argument("--json", action="store_true", help="Print the findings as JSON.")
        parser.add_argument("--pending-minutes", type=float, default=None)
        parser.add_argument("--strict", action="store_true", help="Warnings are problems too.")

    def handle(self, *args: Any, **options: Any) -> None:
        doctor = Doctor(
            pending_minutes=options["pending_minutes"] or settings.MEMORY_DOCTOR_PENDING_MINUTES,
            http_timeout=settings.MEMORY_DOCTOR_HTTP_TIMEOUT,
        )
        for name in CHECKS:
            if name in options["skip"]:
                continue
            try:
                getattr(doctor, f"check_{name}")()
            except Exception as exc:  # a broken check is a problem, never a traceback
                doctor.fail(name, f"the check itself failed: {exc.__class__.__name__}: {exc}")
        bad = {"fail", "warn"} if options["strict"] else {"fail"}
        problems = [f for f in doctor.findings if f.level in bad]
        if options["json"]:
            self.stdout.write(json.dumps({"ok": not problems, "findings": [asdict(f) for f in doctor.findings]}))
        else:
            for finding in doctor.findings:
                mark = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}[finding.level]
                stream = self.stdout if finding.level == "ok" else self.stderr
                stream.write(f"{mark} {finding.check}: {finding.message}")
        if problems:
            raise CommandError(f"{len(problems)} problems found", returncode=1)
