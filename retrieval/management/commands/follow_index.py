"""`manage.py follow_index`: keep this machine's index in step with the change log in the
foreground (the worker does the same in a thread; see retrieval/follow.py)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from retrieval.follow import FollowThread


class Command(BaseCommand):
    help = "Follow the card change log into this machine's local search index until stopped."

    def handle(self, *args: Any, **options: Any) -> None:
        thread = FollowThread()
        thread.start()
        try:
            while thread.is_alive():
                thread.join(1.0)
        except KeyboardInterrupt:
            thread.stopped.set()
