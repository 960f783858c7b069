"""The one way an audit entry is written: who did what to which target, and why.

The verbs of `facts.curation` call it with the curator (or the agent's identity) as the
actor, dashboard settings pages through `dashboard.helpers.audit`. Details hold ids and
counts, never content.
"""

from __future__ import annotations

from typing import Any

from facts.models import AuditEvent


def record(
    actor: str,
    action: str,
    *,
    target: str = "",
    user_id: str = "",
    agent_name: str = "",
    reason: str = "",
    **details: Any,
) -> AuditEvent:
    return AuditEvent.objects.create(
        # The column holds 150 characters; an agent's identity can be longer (PostgreSQL would refuse it).
        actor=actor[:150],
        action=action,
        target=target,
        user_id=user_id or "",
        agent_name=agent_name or "",
        reason=reason or "",
        details=details,
    )
