"""Erase a user, or one agent / thread / project of theirs, down to the bytes."""

from __future__ import annotations

import getpass
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from facts.erasure.guard import running_for
from facts.erasure.plan import Plan, plan
from facts.erasure.run import erase
from facts.erasure.scope import Scope
from facts.intake.people import NoSuchPerson, PersonError, person_id
from facts.models import Erasure
from facts.storage.errors import InvalidId

SHOWN_IDS = 20


class Command(BaseCommand):
    help = (
        "Erase everything held about a user (cards, profile, turns, candidates, runs, revisions, usage, "
        "index rows and their bytes). Without --yes: a dry run that lists what would go and changes nothing. "
        "Rerun it to finish an erasure that was interrupted."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True, help="The user id as the agents send it")
        parser.add_argument("--agent", default="", help="Only this agent's memory and turns")
        parser.add_argument("--thread", default="", help="Only what came from this conversation")
        parser.add_argument("--project", default="", help="Only what came from turns of this project")
        parser.add_argument("--yes", action="store_true", help="Really erase (default: dry run)")
        parser.add_argument("--json", action="store_true", help="Counts and ids as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            # Someone memory holds something about, or a one-line refusal: never an
            # erasure of nobody ("0 item(s) removed").
            person_id(options["user"])
        except NoSuchPerson as exc:
            done = Erasure.objects.filter(user_id=options["user"], status=Erasure.Status.DONE).order_by("-id").first()
            if done is None or not options["yes"]:
                raise CommandError(str(exc)) from None
            # A rerun after an erasure that finished (its process killed before it said
            # so): nothing is left, and that is success, not an error.
            self.stdout.write(f"Nothing left to erase: erasure {done.id} of this user finished at {done.finished_at}.")
            return
        except PersonError as exc:
            raise CommandError(str(exc)) from None
        try:
            scope = Scope.of(options["user"], options["agent"], options["thread"], options["project"])
        except InvalidId as exc:
            raise CommandError(str(exc)) from None
        found = plan(scope)
        if not options["yes"]:
            self._show(found, dry_run=True, as_json=options["json"])
            return
        report = erase(scope, actor=f"manage.py ({getpass.getuser()})")
        if options["json"]:
            self.stdout.write(
                json.dumps({"erasure_id": report.erasure_id, "counts": report.counts, "bytes": report.bytes})
            )
            return
        self.stdout.write(
            f"Erasure {report.erasure_id} of {_label(scope)} done{' (resumed)' if report.resumed else ''}."
        )
        for kind, count in report.counts.items():
            if count:
                self.stdout.write(f"  {kind}: {count}")
        for item in report.bytes:
            self.stdout.write(f"  scrubbed {item['file']}: {item}")

    def _show(self, found: Plan, *, dry_run: bool, as_json: bool) -> None:
        items = found.items()
        if as_json:
            self.stdout.write(json.dumps({"dry_run": dry_run, "counts": found.counts(), "ids": items}))
            return
        running = running_for(found.scope.user_id)
        if running is not None:
            self.stdout.write(f"An erasure of this user is unfinished (#{running.pk}): run with --yes to finish it.")
        self.stdout.write(f"Dry run: erasing {_label(found.scope)} would remove (nothing changed):")
        for kind, ids in items.items():
            shown = ", ".join(str(i) for i in ids[:SHOWN_IDS]) + (" …" if len(ids) > SHOWN_IDS else "")
            self.stdout.write(f"  {kind}: {len(ids)}" + (f"  [{shown}]" if ids else ""))
        self.stdout.write("Run again with --yes to erase.")


def _label(scope: Scope) -> str:
    return " ".join(f"{k}={v!r}" for k, v in scope.as_dict().items())
