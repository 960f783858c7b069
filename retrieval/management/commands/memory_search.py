"""Search one user × agent's memory the way the agents' tool does."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from retrieval.search import memory_search_json, search


class Command(BaseCommand):
    help = "Ranked search of a user × agent's facts (and a project's, with --project)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("query", nargs="+", help="Search words (any text; it is never FTS syntax).")
        parser.add_argument("--user", required=True)
        parser.add_argument("--agent", required=True)
        parser.add_argument("--project", default=None)
        parser.add_argument("--limit", type=int, default=5)
        parser.add_argument(
            "--json",
            action="store_true",
            help=(
                "Print the memory_search tool's JSON answer (the same results, within its token cap),"
                ' each result with its score\'s breakdown under "explain" (outside the cap).'
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        query = " ".join(options["query"])
        scope = {"user_id": options["user"], "agent_name": options["agent"], "project_id": options["project"]}
        if options["json"]:
            self.stdout.write(memory_search_json(query, limit=options["limit"], explain=True, **scope))
            return
        hits = search(query, limit=options["limit"], **scope)
        if not hits:
            self.stdout.write("no matching facts")
            return
        for hit in hits:
            lexical = (
                "—" if hit.lexical_rank is None else f"{hit.lexical:.4f} (#{hit.lexical_rank}, bm25 {hit.bm25:.4f})"
            )
            vector = (
                "—" if hit.vector is None else f"{hit.vector:.4f} (#{hit.vector_rank}, cosine {hit.similarity:.3f})"
            )
            dated = "" if hit.date is None else f", date {hit.date:.1f} (said on a day the query names)"
            self.stdout.write(
                f"{hit.score:8.4f}  {hit.id}  [{hit.category}] {hit.content}\n"
                f"          relevance {hit.fused:.4f} [lexical {lexical}, vector {vector}{dated}] × decay {hit.decay:.3f}"
                f" + confidence {hit.confidence:.2f} ({hit.confidence_part:.3f}); created {hit.created_at:%Y-%m-%d}"
            )
        self.stderr.write(json.dumps({"results": len(hits)}))
