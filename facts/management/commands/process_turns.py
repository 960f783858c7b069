"""Process pending turns now (the sweeper beside the worker, and the retry path)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from facts import tasks


class Command(BaseCommand):
    help = (
        "Extract every thread whose debounce window is over. --retry-failed puts failed turns "
        "(and turns stuck in processing past their lease) back first; --force ignores the debounce window."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--retry-failed",
            action="store_true",
            help="Retry failed turns and turns stuck in processing past their lease.",
        )
        parser.add_argument("--force", action="store_true", help="Do not wait for the debounce window.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["retry_failed"]:
            self.stdout.write(f"{tasks.retry_failed()} turn(s) back to pending")
        else:
            tasks.reclaim_expired()  # the sweep a running db_worker does anyway
        threads = tasks.due_threads(include_waiting=options["force"])
        counts: dict[str, int] = {}
        for user_id, agent_name, thread_id in threads:
            outcome = tasks.process_thread(user_id, agent_name, thread_id, force=options["force"])
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
            if outcome.error:
                self.stderr.write(f"{user_id}/{agent_name}/{thread_id}: {outcome.error}")
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "nothing due"
        self.stdout.write(f"{len(threads)} thread(s): {summary}")
