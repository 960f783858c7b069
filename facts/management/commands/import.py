"""Restore an archive written by `manage.py export` into a store without that user."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from facts.portability import importer
from facts.storage.errors import StoreError


class Command(BaseCommand):
    help = (
        "Import an archive made by `manage.py export`. Refuses (and changes nothing) when the "
        "archive is damaged or unsafe, or when the user already has cards or a profile here."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="The .zip archive.")
        parser.add_argument("--check", action="store_true", help="Validate and report; change nothing.")
        parser.add_argument(
            "--skip-history",
            action="store_true",
            help="Restore the cards and the profile only, not candidates, turns, runs and revisions.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            summary = importer.import_archive(
                options["file"],
                actor="manage.py import",
                history=not options["skip_history"],
                check_only=options["check"],
            )
        except importer.ImportRefused as exc:
            raise CommandError(f"Refused, nothing changed: {exc}") from None
        except StoreError as exc:
            # Only after every check passed: something changed here in the meantime (a
            # card or memory.json of this user appeared) or the disk failed.
            raise CommandError(
                f"Import stopped part-way: {exc}. What was written is listed by "
                "`manage.py export --user` for this user; remove it and import again."
            ) from None
        restored = ", ".join(f"{name} {n}" for name, n in summary.restored.items())
        verb = "Would restore" if options["check"] else "Restored"
        self.stdout.write(f"{verb} user {summary.user_id!r}: {restored}")
        if summary.skipped:
            kept = ", ".join(f"{name} {n}" for name, n in summary.skipped.items())
            self.stdout.write(f"Already here, kept as they were: {kept}")
