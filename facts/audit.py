"""The one way an audit entry is written: who did what to which target, and why.

Dashboard pages call it with the signed-in curator as the actor (`dashboard.helpers.audit`),
the gate's reviewer actions with the reviewer. Details hold ids and counts, never content.
"""

from __future__ import annotations

from typing import Any

from .models import AuditEvent


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
        actor=actor,
        action=action,
        target=target,
        user_id=user_id or "",
        agent_name=agent_name or "",
        reason=reason or "",
        details=details,
    )
