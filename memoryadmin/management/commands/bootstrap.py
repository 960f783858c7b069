"""First-run set-up used by `make run`: the database, roles, the first administrator, demo data.

The first administrator's password: ``ADMIN_PASSWORD`` when set; with DEBUG on (local
use, `make run` on a fresh clone) the well-known ``admin``; with DEBUG off it is asked
for in a terminal, and without one the command refuses: a deployment never starts with
a default password. `doctor` fails while any account still has it.
"""

from __future__ import annotations

import getpass
import sys
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model, password_validation
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from facts.access import ensure_roles
from facts.models import FactCard, ProfileSection

# The local-only default (README: log in as admin / admin); `doctor` looks for it.
DEFAULT_PASSWORD = "admin"


class Command(BaseCommand):
    help = (
        "Migrate, collect static files (DEBUG off), create the roles, the first administrator (ADMIN_USERNAME; "
        "its password from ADMIN_PASSWORD, asked for in a terminal, or 'admin' with DEBUG on) and demo data when "
        "memory is empty."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-demo", action="store_true")
        parser.add_argument(
            "--no-input", action="store_true", help="Never ask for a password: refuse instead (scripts, CI)."
        )
        parser.add_argument(
            "--queue-demo",
            action="store_true",
            help="queue the demo for the worker instead of loading it here (make run: the server starts sooner)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # One process for what `make run` did in three (migrate, collectstatic, bootstrap):
        # each Django start costs ~1.5 s of CPU on a first start.
        call_command("migrate", interactive=False, verbosity=0)
        if not settings.DEBUG:
            # With DEBUG on WhiteNoise serves the static sources themselves (its finders),
            # so only a DEBUG-off server needs the collected, compressed copies.
            call_command("collectstatic", interactive=False, verbosity=0)
        ensure_roles()
        User = get_user_model()
        if not User.objects.exists():
            username = settings.ADMIN_USERNAME
            password, origin = self._password(username, ask=not options["no_input"])
            User.objects.create_superuser(username, "", password)
            if origin == "default":
                self.stdout.write(
                    self.style.WARNING(
                        f"Created the administrator '{username}' with password '{password}' "
                        "(local use only: DEBUG is on; set ADMIN_USERNAME/ADMIN_PASSWORD, and DEBUG=0 on a server)."
                    )
                )
            else:
                self.stdout.write(f"Created the administrator '{username}' with the password {origin}.")
        store_empty = not any(settings.MEMORY_ROOT.glob("users/*")) and not any(settings.MEMORY_ROOT.glob("projects/*"))
        if store_empty:
            from retrieval import indexconn

            indexconn.connection()  # an empty store's empty index, made now: the demo's writes go to it
        if store_empty and not FactCard.objects.exists() and not ProfileSection.objects.exists():
            if options["no_demo"]:
                return
            if options["queue_demo"]:
                from memoryadmin.tasks import load_demo

                load_demo.enqueue()
                self.stdout.write("Demo data queued: the worker loads it in a few seconds.")
                return
            try:
                call_command("demo")
            except Exception as exc:  # the demo is a convenience; never block start-up
                self.stderr.write(f"demo data not loaded: {exc}")

    def _password(self, username: str, *, ask: bool) -> tuple[str, str]:
        """(password, where it came from): ADMIN_PASSWORD, typed, or the local default."""
        given = settings.ADMIN_PASSWORD or ""
        if given:
            if not settings.DEBUG:
                _check(given, username, "ADMIN_PASSWORD")
            return given, "from ADMIN_PASSWORD"
        if settings.DEBUG:
            return DEFAULT_PASSWORD, "default"
        if ask and sys.stdin is not None and sys.stdin.isatty():
            first = getpass.getpass(f"Password for the first administrator '{username}': ")
            if getpass.getpass("The same password again: ") != first:
                raise CommandError("The two passwords differ; nothing was created. Run `manage.py bootstrap` again.")
            _check(first, username, "the password")
            return first, "you typed"
        raise CommandError(
            "DEBUG is off and ADMIN_PASSWORD is not set: refusing to create the first administrator with a "
            "default password. Set ADMIN_PASSWORD, or run `manage.py bootstrap` in a terminal to type one."
        )


def _check(password: str, username: str, what: str) -> None:
    """Outside DEBUG: not the default, not the username, and Django's validators."""
    problems: list[str] = []
    if password in (DEFAULT_PASSWORD, username):
        problems.append(f"it is the well-known default {DEFAULT_PASSWORD!r} or the username")
    try:
        password_validation.validate_password(password, get_user_model()(username=username))
    except ValidationError as exc:
        problems.extend(message.rstrip(".") for message in exc.messages)
    if problems:
        raise CommandError(f"{what} is refused with DEBUG off: {'; '.join(problems)}. Nothing was created.")
