"""Rebuild the DB mirror (and the search index) from the memory files, or check drift."""

from __future__ import annotations

import json
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from memoryadmin import rebuild


class Command(BaseCommand):
    help = "Rebuild mirror and index from the files under MEMORY_ROOT; --check only reports drift."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--check", action="store_true", help="Change nothing; exit 1 when there is drift.")
        parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
        parser.add_argument("--no-progress", action="store_true", help="No progress bar.")

    def handle(self, *args: Any, **options: Any) -> None:
        bar: tqdm | None = None

        def progress(done: int, total: int) -> None:
            nonlocal bar
            if options["no_progress"] or options["json"]:
                return
            if bar is None:
                bar = tqdm(total=total, unit="card", desc="reading files", file=self.stderr._out)
            bar.update(done - bar.n)

        started = time.monotonic()
        if options["check"]:
            report = rebuild.check(progress=progress)
            if bar is not None:
                bar.close()
            self._print_report(report, options["json"])
            if not report.clean:
                raise CommandError("drift found between the files and their copies", returncode=1)
            return
        result = rebuild.rebuild(progress=progress, actor="reindex")
        if bar is not None:
            bar.close()
        elapsed = time.monotonic() - started
        if options["json"]:
            self.stdout.write(json.dumps({**result.as_dict(), "seconds": round(elapsed, 3)}))
            return
        self.stdout.write(
            f"Rebuilt from the files in {elapsed:.2f}s: {result.cards} cards, {result.profiles} profiles"
            + "".join(f", {k} {v}" for k, v in result.extra.items())
        )
        for path, problem in result.unreadable:
            self.stderr.write(f"skipped {path}: {problem}")

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
