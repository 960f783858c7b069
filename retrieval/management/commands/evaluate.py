"""`manage.py evaluate FILE.jsonl`: a team's labelled questions through the agents' search
(recall@k, hit@k, MRR, false results on no-answer questions, latency; `retrieval.evaluation`)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from retrieval.evaluation import QuestionsError, load_questions, outcome_line, run, summary_lines
from retrieval.limits import SEARCH_LIMIT_DEFAULT, SEARCH_LIMIT_MAX, SEARCH_LIMIT_MIN


class Command(BaseCommand):
    help = (
        "Run labelled questions (JSON Lines: id, user_id, agent_name, project_id?, query, expected_fact_ids?,"
        " expected_message_ids?) through memory_search and print recall@k, hit@k, MRR, the false-result rate"
        " of no-answer questions and latency."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the questions, one JSON object a line")
        parser.add_argument(
            "--limit",
            type=int,
            default=SEARCH_LIMIT_DEFAULT,
            help=f"results asked for per question, k of recall@k ({SEARCH_LIMIT_MIN}..{SEARCH_LIMIT_MAX}, as the tool)",
        )
        parser.add_argument("--json", action="store_true", help="print the per-question lines and summary as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        limit = options["limit"]
        if not SEARCH_LIMIT_MIN <= limit <= SEARCH_LIMIT_MAX:
            raise CommandError(f"--limit must be within {SEARCH_LIMIT_MIN}..{SEARCH_LIMIT_MAX} (the tool's range)")
        try:
            questions = load_questions(options["file"])
        except QuestionsError as exc:
            raise CommandError(str(exc)) from None
        as_json = options["json"]

        def show(outcome: Any) -> None:
            self.stdout.write(outcome_line(outcome))

        report = run(questions, limit=limit, on_outcome=None if as_json else show)
        if as_json:
            self.stdout.write(json.dumps(report.as_dict(), ensure_ascii=False, indent=2))
            return
        for line in summary_lines(report.summary(), limit=limit):
            self.stdout.write(line)
