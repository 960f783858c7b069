"""Load the demo data (idempotent), or run the article's offline scenario."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = (
        "Load the shipped demo conversations through the real pipeline; --offline-article runs the article's §8 demo."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--offline-article",
            action="store_true",
            help="Run the article's offline scenario against a throwaway MEMORY_ROOT and print its observations.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["offline_article"]:
            from memoryadmin import article_demo

            article_demo.run(self.stdout)
            return
        from facts import demo

        demo.load_demo(self.stdout)
