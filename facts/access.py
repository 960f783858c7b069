"""Roles: viewer (read), reviewer (curate), admin (delete permanently, settings, keys).

Roles are Django groups carrying the two custom permissions of `AuditEvent.Meta`;
superusers have every permission.
"""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission

CURATE = "facts.curate_memory"
ADMINISTER = "facts.administer_memory"

ROLES: dict[str, list[str]] = {
    "viewer": [],
    "reviewer": ["curate_memory"],
    "admin": ["curate_memory", "administer_memory"],
}


def ensure_roles() -> None:
    for name, codenames in ROLES.items():
        group, _ = Group.objects.get_or_create(name=name)
        perms = Permission.objects.filter(content_type__app_label="facts", codename__in=codenames)
        group.permissions.set(perms)
