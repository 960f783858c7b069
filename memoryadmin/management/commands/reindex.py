"""Rebuild the DB mirror (and the search index) from the memory files, or check drift.

Exit status (both modes): 0 all is well; 1 drift (``--check`` only: mirror or index
differ from the files); 2 some memory files cannot be read — those cards are missing
from context and search until a person fixes or removes them, so it outranks drift.
``reindex`` itself still rebuilds everything readable before exiting 2.
"""

from __future__ import annotations

import json
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from memoryadmin import rebuild

EXIT_DRIFT = 1
EXIT_UNREADABLE = 2
# What each step of a rebuild is called on the terminal (`rebuild.Phase`).
STEPS = {
    "files": "reading files",
    "mirror": "writing the mirror",
    "embedding": "embedding cards",
    "index": "writing the search index",
    "catch-up": "catching up with writes made meanwhile",
}


class Command(BaseCommand):
    help = "Rebuild mirror and index from the files under MEMORY_ROOT; --check only reports drift."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--check",
            action="store_true",
            help="Change nothing; exit 1 when there is drift, 2 when a memory file cannot be read.",
        )
        parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
        parser.add_argument("--no-progress", action="store_true", help="No progress bar.")
        parser.add_argument(
            "--no-cache",
            action="store_true",
            help=(
                "Tokenize and embed every card again instead of reusing the cache of derived data (and rewrite "
                "it), and rewrite every mirror row, not only those whose file changed."
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        bar: tqdm | None = None
        quiet = options["no_progress"] or options["json"]
        step = ["files"]

        def progress(done: int, total: int) -> None:
            nonlocal bar
            if quiet:
                return
            if bar is None:
                bar = tqdm(total=total, unit="card", desc=STEPS[step[0]], file=self.stderr._out)
            bar.update(done - bar.n)

        def phase(name: str) -> None:
            # A bar per counted step (reading the files, embedding); a line for the others.
            nonlocal bar
            step[0] = name
            if quiet:
                return
            if bar is not None:
                bar.close()
                bar = None
            if name not in ("files", "embedding"):
                self.stderr.write(f"{STEPS.get(name, name)}…")

        started = time.monotonic()
        if options["check"]:
            report = rebuild.check(progress=progress)
            if bar is not None:
                bar.close()
            self._print_report(report, options["json"])
            self._fail_on_unreadable(report.unreadable)
            if not report.in_step:
                raise CommandError("drift found between the files and their copies", returncode=EXIT_DRIFT)
            return
        result = rebuild.rebuild(progress=progress, actor="reindex", no_cache=options["no_cache"], phase=phase)
        if bar is not None:
            bar.close()
        elapsed = time.monotonic() - started
        if options["json"]:
            self.stdout.write(json.dumps({**result.as_dict(), "seconds": round(elapsed, 3)}))
        else:
            self.stdout.write(
                f"Rebuilt from the files in {elapsed:.2f}s: {result.cards} cards, {result.profiles} profiles"
                + "".join(f", {k} {v}" for k, v in result.extra.items())
            )
            for path, problem in result.unreadable:
                self.stderr.write(f"skipped {path}: {problem}")
        self._fail_on_unreadable(result.unreadable)

    def _fail_on_unreadable(self, unreadable: list[tuple[str, str]]) -> None:
        if unreadable:
            count = len(unreadable)
            raise CommandError(
                f"{count} memory file{' cannot' if count == 1 else 's cannot'} be read and "
                f"{'is' if count == 1 else 'are'} missing from context and search (listed above, relative to "
                "MEMORY_ROOT): fix or remove them, then run `manage.py reindex`",
                returncode=EXIT_UNREADABLE,
            )

    def _print_report(self, report: rebuild.CheckReport, as_json: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps(report.as_dict(), ensure_ascii=False))
            return
        for name, drift in report.parts.items():
            if drift.clean:
                self.stdout.write(f"{name}: in step with the files")
                continue
            for kind in ("missing", "extra", "changed"):
                ids = getattr(drift, kind)
                if ids:
                    self.stdout.write(
                        f"{name}: {len(ids)} {kind}: {', '.join(ids[:50])}{' …' if len(ids) > 50 else ''}"
                    )
        for path, problem in report.unreadable:
            self.stdout.write(f"unreadable {path}: {problem}")
