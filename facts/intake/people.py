"""The person an id names, as people type it on pages and commands (erase, export,
profiles): checked with the agents' doors' rules, and known to memory.

Agents create people by sending turns; a curator never does. So an id typed by a person
must name someone memory holds something about — otherwise the answer is "no such
person", not an action on nobody ("Erased user nobody-x: 0 item(s) removed", an archive
of zeros, an empty profile whose Save creates the person). An id that memory does hold
is accepted as it was stored, even one only `ingest` accepts (a path-like id from another
system): it must stay erasable and exportable.
"""

from __future__ import annotations

from django.conf import settings

from facts.intake.sanitize import has_control
from facts.intake.turns import TurnRejected, clean_id
from facts.models import Candidate, Erasure, ExtractionRun, FactCard, Injection, ProfileRevision, ProfileSection, Turn
from facts.storage.errors import InvalidId
from facts.storage.ids import normalize_id


class PersonError(ValueError):
    """Not a person to act on; `status` is the page's answer (400 or 404)."""

    status = 400


class InvalidPersonId(PersonError):
    status = 400


class NoSuchPerson(PersonError):
    status = 404


def held(user_id: str) -> bool:
    """Whether memory holds anything about `user_id` (rows, files, an unfinished erasure)."""
    for model in (FactCard, ProfileSection, Turn, Candidate, ProfileRevision, ExtractionRun, Injection):
        if model.objects.filter(user_id=user_id).exists():
            return True
    if Erasure.objects.filter(user_id=user_id, status=Erasure.Status.RUNNING).exists():
        return True
    try:
        folder = settings.MEMORY_ROOT / "users" / normalize_id(user_id, what="user id")
    except InvalidId:
        return False
    # Files the mirror may not have yet (hand-placed, before a reindex); an empty folder
    # left by forgetting a last conversation holds nothing.
    return (folder / "memory.json").is_file() or any(folder.glob("agents/*/facts/*/*.md"))


def person_id(value: object) -> str:
    """`value` when it names someone memory holds something about; else `InvalidPersonId`
    (what the agents' API would refuse) or `NoSuchPerson`."""
    if not isinstance(value, str) or value == "":
        raise InvalidPersonId("Not a valid user id: it is empty")
    if len(value) > settings.API_MAX_ID_CHARS or has_control(value):
        raise InvalidPersonId(
            f"Not a valid user id: at most {settings.API_MAX_ID_CHARS} characters, and no control characters"
        )
    if held(value):
        return value
    try:
        clean_id("user_id", value, required=True, allow_paths=False)
    except TurnRejected as exc:
        raise InvalidPersonId(f"Not a valid user id: {exc.message}") from None
    raise NoSuchPerson(f"No such person: memory holds nothing about {value!r}")
