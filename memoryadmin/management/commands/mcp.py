"""Serve one user's memory to a desktop or IDE MCP client over stdio.

The client starts this command itself (see docs/operations.md "MCP"); whoever can start it can
already read the database and the memory files, so there is no key: the user, agent
and project are fixed by the arguments for the life of the process. A project of
another tenant than the user's is refused before the server starts (`facts.tenancy`).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from facts import tenancy
from memoryadmin.api_schemas import BadRequest, clean_agent, clean_id
from memoryadmin.mcp_server import Identity, build_server


class Command(BaseCommand):
    help = "Serve memory as an MCP server over stdio for one user × agent (× project)."
    # stdout is the protocol's channel: nothing else may be written to it.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True, help="The user id whose memory is served")
        parser.add_argument("--agent", default="", help="The agent name (default: the __default__ bucket)")
        parser.add_argument("--project", default="", help="A project id: its facts are loaded too")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            identity = Identity(
                user_id=str(clean_id("--user", options["user"], required=True)),
                agent_name=clean_agent(options["agent"] or None),
                project_id=clean_id("--project", options["project"], required=False),
                actor="mcp:stdio",
            )
        except BadRequest as exc:
            raise CommandError(exc.text) from None
        try:
            # The same wall as over HTTP: the user's tenant must own the project or share it.
            tenancy.check(identity.user_id, identity.project_id)
        except tenancy.ProjectNotAllowed as exc:
            raise CommandError(f"--project: {exc.message} (project_not_allowed)") from None
        build_server(lambda ctx: identity).run("stdio")
