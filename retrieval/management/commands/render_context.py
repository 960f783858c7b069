"""Print exactly what an agent would be shown as auto-loaded memory."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from retrieval.render import render_context


class Command(BaseCommand):
    help = "Render the memory block of a user × agent (× project) within its token budgets."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True)
        parser.add_argument("--agent", required=True)
        parser.add_argument("--project", default=None)
        parser.add_argument("--mode", choices=("auto", "tool"), default="auto")
        parser.add_argument("--budget", type=int, default=None)
        parser.add_argument("--correction-budget", type=int, default=None)
        parser.add_argument("--top-n", type=int, default=None)
        parser.add_argument("--json", action="store_true", help='{"text", "tokens", "included", "excluded"}')

    def handle(self, *args: Any, **options: Any) -> None:
        rendered = render_context(
            user_id=options["user"],
            agent_name=options["agent"],
            project_id=options["project"],
            mode=options["mode"],
            budget=options["budget"],
            correction_budget=options["correction_budget"],
            top_n=options["top_n"],
        )
        if options["json"]:
            self.stdout.write(json.dumps(rendered.as_dict(), ensure_ascii=False))
            return
        self.stdout.write(rendered.text)
        self.stderr.write(
            f"\n{rendered.tokens} tokens (budget {rendered.budget}, corrections {rendered.correction_budget}, "
            f"top_n {rendered.top_n}); {len(rendered.included)} facts included, {len(rendered.excluded)} excluded"
        )
        for fact_id, reason in rendered.excluded:
            self.stderr.write(f"  excluded {fact_id}: {reason}")
