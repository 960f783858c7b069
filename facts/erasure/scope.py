"""What an erasure covers: a user, optionally narrowed to one agent, thread and/or
project, with the rows and turns that fall inside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q

from facts.models import (
    Erasure,
)
from facts.storage.ids import normalize_agent, normalize_id


@dataclass(frozen=True)
class Scope:
    """What to erase: a user, optionally narrowed to one agent, thread and/or project."""

    user_id: str
    agent_name: str = ""
    thread_id: str = ""
    project_id: str = ""

    @classmethod
    def of(
        cls, user_id: str, agent_name: str | None = None, thread_id: str | None = None, project_id: str | None = None
    ) -> Scope:
        """Validated the way the rest of the system validates ids (raises `InvalidId`)."""
        normalize_id(user_id, what="user_id")
        agent = normalize_agent(agent_name) if agent_name else ""
        if project_id:
            normalize_id(project_id, what="project_id")
        return cls(user_id, agent, thread_id or "", project_id or "")

    @property
    def whole_user(self) -> bool:
        return not (self.agent_name or self.thread_id or self.project_id)

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in vars(self).items() if v}

    def rows(self, with_project: bool = True) -> Q:
        """The DB rows of this scope (tables with user/agent/thread/project columns)."""
        query = Q(user_id=self.user_id)
        if self.agent_name:
            query &= Q(agent_name=self.agent_name)
        if self.thread_id:
            query &= Q(thread_id=self.thread_id)
        if self.project_id and with_project:
            query &= Q(project_id=self.project_id)
        return query

    def covers_turn(self, agent_name: str, thread_id: str, project_id: str = "") -> bool:
        return (
            self.agent_name in ("", agent_name)
            and self.thread_id in ("", thread_id)
            and (not self.project_id or not project_id or self.project_id == project_id)
        )


def scope_of(marker: Erasure) -> Scope:
    return Scope(marker.user_id, marker.agent_name, marker.thread_id, marker.project_id)
