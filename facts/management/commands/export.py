"""Write one zip archive with everything held about one user."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from facts.intake.people import PersonError, person_id
from facts.portability import export
from facts.storage.errors import InvalidId


class Command(BaseCommand):
    help = (
        "Export everything held about one user (cards, profile, candidates, turns, runs, …) "
        "into one zip archive that is readable without this software."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True, help="The user id, as the agents send it.")
        parser.add_argument("--out", help="Archive to write (default: memory-export-<user>-<time>.zip here).")
        parser.add_argument("--force", action="store_true", help="Replace --out if it exists.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            user_id = person_id(options["user"])  # an archive of zeros helps nobody
        except PersonError as exc:
            raise CommandError(str(exc)) from None
        try:
            out = Path(options["out"] or export.default_filename(user_id))
        except InvalidId as exc:
            raise CommandError(str(exc)) from None
        if out.is_dir():
            raise CommandError(f"{out} is a folder; give a file name")
        try:
            summary = export.export_user(user_id, out, overwrite=options["force"])
        except FileExistsError:
            raise CommandError(f"{out} exists; use --force to replace it") from None
        except OSError as exc:
            raise CommandError(f"cannot write {out}: {exc.strerror or exc}") from None
        export.audit_export("manage.py export", summary)
        counts = ", ".join(f"{name} {n}" for name, n in summary.counts.items())
        self.stdout.write(f"Wrote {out} ({summary.bytes} bytes): {counts}")
