"""First-run set-up used by `make run`: roles, the first administrator, demo data."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from facts.access import ensure_roles
from facts.models import FactCard, ProfileSection


class Command(BaseCommand):
    help = "Create the roles, the first administrator (ADMIN_USERNAME/ADMIN_PASSWORD) and demo data when empty."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-demo", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
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
        if store_empty:
            from retrieval import index

            index.connection()  # an empty store's empty index, made now: the demo's writes go to it
        if store_empty and not FactCard.objects.exists() and not ProfileSection.objects.exists():
            if options["no_demo"]:
                return
            try:
                call_command("demo")
            except Exception as exc:  # the demo is a convenience; never block start-up
                self.stderr.write(f"demo data not loaded: {exc}")
