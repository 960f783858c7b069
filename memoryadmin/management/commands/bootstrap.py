"""First-run set-up used by `make run`: the database, roles, the first administrator, demo data."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from facts.access import ensure_roles
from facts.models import FactCard, ProfileSection


class Command(BaseCommand):
    help = (
        "Migrate, collect static files (DEBUG off), create the roles, the first administrator "
        "(ADMIN_USERNAME/ADMIN_PASSWORD) and demo data when memory is empty."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-demo", action="store_true")
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
            User.objects.create_superuser(settings.ADMIN_USERNAME, "", settings.ADMIN_PASSWORD)
            self.stdout.write(
                self.style.WARNING(
                    f"Created the administrator '{settings.ADMIN_USERNAME}' with password "
                    f"'{settings.ADMIN_PASSWORD}' (local use only: set ADMIN_USERNAME/ADMIN_PASSWORD)."
                )
            )
        store_empty = not any(settings.MEMORY_ROOT.glob("users/*")) and not any(settings.MEMORY_ROOT.glob("projects/*"))
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
