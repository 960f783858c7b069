"""`manage.py backtest`: replay recorded candidates through the live gate with other
settings and list the verdicts that would flip (writes nothing; `facts.judging.backtest`)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from facts.judging.backtest import backtest
from facts.judging.runs import REVIEW_AUTO, REVIEW_MANUAL


def _day(value: date | None, at: time) -> datetime | None:
    return None if value is None else datetime.combine(value, at, tzinfo=UTC)


class Command(BaseCommand):
    help = "Replay recorded candidates through the gate with another threshold or review mode (writes nothing)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--threshold", type=float, help="confidence threshold (default: as each run was judged)")
        parser.add_argument("--review-mode", choices=[REVIEW_AUTO, REVIEW_MANUAL])
        parser.add_argument("--since", type=date.fromisoformat, help="YYYY-MM-DD (runs started that day or later)")
        parser.add_argument("--until", type=date.fromisoformat, help="YYYY-MM-DD (inclusive)")
        parser.add_argument("--user", default="")
        parser.add_argument("--agent", default="")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        threshold = options["threshold"]
        if threshold is not None and not 0 <= threshold <= 1:
            raise CommandError("--threshold must be between 0 and 1")
        report = backtest(
            threshold=threshold,
            review_mode=options["review_mode"],
            since=_day(options["since"], time.min),
            until=_day(options["until"], time.max),
            user=options["user"],
            agent=options["agent"],
        ).as_dict()
        if options["json"]:
            self.stdout.write(json.dumps(report, ensure_ascii=False, indent=2))
            return
        self.stdout.write(f"{report['candidates']} candidates in {report['runs']} runs, {len(report['flips'])} flips")
        for move, n in report["by_change"].items():
            self.stdout.write(f"  {move}: {n}")
        for code, moved in report["by_reason"].items():
            self.stdout.write(f"  {code}: +{moved['added']} -{moved['removed']}")
