"""A curator's changes to a user's profile (`memory.json`): editing sections, and
reverting every section to a past version.

Both write through `facts.storage.writer.commit_profile` (a read-modify-write under the user's
lock, refused with `RevisionConflict` when the profile moved on from the version the
curator saw) and audit what changed through `facts.audit`. A section a curator writes
names them as its source's actor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from facts import audit
from facts.curation.cards import UnknownRevision
from facts.enums import PROFILE_SECTIONS, SourceKind
from facts.models import AuditEvent, ProfileRevision
from facts.storage import writer
from facts.storage.cardfile import Source, now_utc
from facts.storage.profilefile import Profile, Section


def summaries(document: dict[str, Any]) -> dict[str, str]:
    """Each section's text in a stored profile document (a `ProfileRevision`)."""
    out = {}
    for group in ("user", "history"):
        for name, section in (document.get(group) or {}).items():
            out[name] = (section or {}).get("summary", "") if isinstance(section, dict) else ""
    return out


def version_summaries(user_id: str, revision: int) -> dict[str, str] | None:
    """Each section's text as version `revision` had it ({} before the first), or None
    when that version is not recorded."""
    if revision == 0:
        return {}
    row = ProfileRevision.objects.filter(user_id=user_id, revision=revision).first()
    return summaries(row.document) if row else None


@dataclass(frozen=True)
class ProfileChange:
    profile: Profile
    sections: list[str]  # the sections whose text changed; empty: nothing was written


def _set(profile: Profile, name: str, text: str, actor: str) -> None:
    source = Source(kind=SourceKind.MANUAL, actor=actor)
    profile.set_section(name, Section(summary=text, updated_at=now_utc(), source=source))


def edit_profile(
    user_id: str, typed: Mapping[str, str], *, actor: str, reason: str, expected_revision: int
) -> ProfileChange:
    """Write the sections of `typed` whose text differs (ignoring edge spaces) in one new
    version; a section `typed` does not name is left as it is. Each changed section is
    audited as a profile edit."""
    changed: list[str] = []

    def change(profile: Profile) -> Profile:
        changed.clear()
        for name, text in typed.items():
            if profile.section(name).summary.strip() == text.strip():
                continue
            _set(profile, name, text, actor)
            changed.append(name)
        return profile

    updated = writer.commit_profile(user_id, change, actor=actor, reason=reason, expected_revision=expected_revision)
    if updated.revision == expected_revision or not changed:
        return ProfileChange(updated, [])
    for name in changed:
        audit.record(
            actor,
            AuditEvent.Action.PROFILE_EDIT,
            target=name,
            user_id=user_id,
            reason=reason,
            revision=updated.revision,
        )
    return ProfileChange(updated, list(changed))


def revert_profile(user_id: str, to_revision: int, *, actor: str, reason: str, expected_revision: int) -> ProfileChange:
    """Bring every section's text back to version `to_revision`, written as a new version
    (the history keeps both) and audited as one revert. `UnknownRevision` when that
    version is not recorded."""
    old = version_summaries(user_id, to_revision)
    if old is None or to_revision == 0:
        raise UnknownRevision(f"{user_id} has no version {to_revision}")
    changed: list[str] = []

    def change(profile: Profile) -> Profile:
        changed.clear()
        for name in PROFILE_SECTIONS:
            text = old.get(name, "")
            if profile.section(name).summary != text:
                _set(profile, name, text, actor)
                changed.append(name)
        return profile

    updated = writer.commit_profile(user_id, change, actor=actor, reason=reason, expected_revision=expected_revision)
    if updated.revision == expected_revision:
        return ProfileChange(updated, [])
    audit.record(
        actor,
        AuditEvent.Action.REVERT,
        target=f"profile:{user_id}",
        user_id=user_id,
        reason=reason,
        to_revision=to_revision,
        revision=updated.revision,
        sections=list(changed),
    )
    return ProfileChange(updated, list(changed))
