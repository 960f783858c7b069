"""Issue an API key for agents; the key is printed once and stored hashed."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from facts.models import AuditEvent
from facts.storage.errors import InvalidId
from facts.storage.ids import normalize_agent
from memoryadmin.models import ApiKey, parse_user_patterns


class Command(BaseCommand):
    help = "Create an API key for the agents' API (printed once; only its hash is kept)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="What the key is for, e.g. 'coder agent in production'")
        parser.add_argument(
            "--agents", default="", help="Comma-separated agent names the key may act for (default: all)"
        )
        parser.add_argument(
            "--users",
            default="",
            help="Comma-separated user ids the key may act for, '*' matching any run of characters,"
            " e.g. 'acme:*,bob' (default: all users)",
        )
        parser.add_argument("--rate-limit", type=int, default=None, help="Requests per minute (default: the setting)")

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["name"].strip()
        if not name:
            raise CommandError("the key needs a name")
        try:
            agents = [normalize_agent(a) for a in options["agents"].split(",") if a.strip()]
        except InvalidId as exc:
            raise CommandError(str(exc)) from None
        try:
            users = parse_user_patterns(options["users"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if options["rate_limit"] is not None and options["rate_limit"] < 0:
            raise CommandError("--rate-limit must be 0 (unlimited) or more")
        key, raw = ApiKey.issue(name, allowed_agents=agents, allowed_users=users, created_by="manage.py")
        if options["rate_limit"] is not None:
            key.rate_limit_per_minute = options["rate_limit"]
            key.save(update_fields=["rate_limit_per_minute"])
        AuditEvent.objects.create(
            actor="manage.py",
            action=AuditEvent.Action.API_KEY,
            target=key.prefix,
            reason="created",
            details={"name": name, "allowed_agents": agents, "allowed_users": users},
        )
        scope = ", ".join(agents) if agents else "every agent"
        scope += " and users " + ", ".join(users) if users else " and every user"
        self.stderr.write(f"API key '{name}' for {scope} (shown once, store it now):")
        self.stdout.write(raw)
