"""A fact a curator writes by hand (the dashboard's *Add fact*).

Checked with the rules the agents' doors apply (ids as the API takes them, the key and
content limits of a model's fact, no control characters), written like an approved
candidate -- one `Plan` committed through `facts.storage.writer.commit`, so the file, the mirror
and the index change together and an active card of the same key is superseded -- with
source kind `manual` and the curator as its actor, and audited as `add_fact`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from facts.audit import record
from facts.enums import Category, SourceKind
from facts.intake.sanitize import has_control
from facts.intake.turns import TurnRejected, clean_agent, clean_id
from facts.judging.plan import Plan, new_card
from facts.judging.schemas import FactCandidate, normalize_key
from facts.models import AuditEvent
from facts.storage.cardfile import Source, now_utc
from facts.storage.store import Bucket, Store, get_store


def _max_length(name: str) -> int:
    return next(rule.max_length for rule in FactCandidate.model_fields[name].metadata if hasattr(rule, "max_length"))


# The limits of a fact a model proposes (facts.judging.schemas.FactCandidate), read from it.
MAX_KEY_CHARS = _max_length("key")
MAX_CONTENT_CHARS = _max_length("content")
# A person vouches for what they write: the highest confidence.
MANUAL_CONFIDENCE = 1.0
# Line breaks may stay in the content (a card's body is Markdown); nothing else below 0x20.
_CONTROL_BUT_NEWLINE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
_KEY = re.compile(r"[a-z0-9_]+")


class ManualFactError(ValueError):
    """Bad input; `field` names the form field it is about."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class ManualFact:
    bucket: Bucket
    key: str
    category: str
    content: str

    @property
    def user_id(self) -> str:
        return self.bucket.user_id or ""

    @property
    def agent_name(self) -> str:
        return self.bucket.agent_name or "" if self.bucket.user_id else ""

    @property
    def project_id(self) -> str:
        return self.bucket.project_id or ""


def check(
    *, scope: str, user_id: str, agent_name: str, project_id: str, key: str, category: str, content: str
) -> ManualFact:
    """The fact as it will be written, or ManualFactError naming the first bad field."""
    try:
        if scope == "user":
            user = clean_id("user", user_id, required=True, allow_paths=False)
            bucket = Bucket(user_id=user, agent_name=clean_agent(agent_name or None))
        elif scope == "project":
            project = clean_id("project", project_id, required=True, allow_paths=False)
            bucket = Bucket(project_id=project)
        else:
            raise ManualFactError("scope", "either user or project")
    except TurnRejected as exc:
        raise ManualFactError("agent" if exc.field == "agent_name" else exc.field, exc.message) from None

    if has_control(key or ""):
        raise ManualFactError("key", "must not contain control characters")
    normal = normalize_key(key or "")
    if not normal:
        raise ManualFactError("key", "is required")
    if len(normal) > MAX_KEY_CHARS:
        raise ManualFactError("key", f"is longer than {MAX_KEY_CHARS} characters")
    if not _KEY.fullmatch(normal):
        raise ManualFactError("key", "letters, digits and underscores only (spaces and dashes become _)")

    if category not in {c.value for c in Category}:
        raise ManualFactError("category", f"one of {', '.join(c.value for c in Category)}")

    text = (content or "").replace("\r\n", "\n").replace("\r", "\n").strip()
    if not text:
        raise ManualFactError("content", "is required")
    if _CONTROL_BUT_NEWLINE.search(text):
        raise ManualFactError("content", "must not contain control characters")
    if len(text) > MAX_CONTENT_CHARS:
        raise ManualFactError("content", f"is longer than {MAX_CONTENT_CHARS} characters")
    return ManualFact(bucket=bucket, key=normal, category=category, content=text)


@dataclass(frozen=True)
class Added:
    fact_id: str
    written: bool  # False: an active card of the scope already says exactly this
    replaced: str | None  # the card of the same key it superseded


def add_fact(fact: ManualFact, *, actor: str, reason: str = "", store: Store | None = None) -> Added:
    """Write `fact` (already `check`ed) as a new active card and audit it."""
    store = store or get_store()
    at = now_utc()
    with store.lock(fact.bucket):
        plan = Plan(store)
        live = plan.bucket(fact.bucket)
        same = live.find_content(fact.content)
        if same is not None:
            return Added(same, False, None)
        replaced = live.keys.get(fact.key)
        card = new_card(
            bucket=fact.bucket,
            key=fact.key,
            content=fact.content,
            category=fact.category,
            confidence=MANUAL_CONFIDENCE,
            at=at,
            source=Source(kind=SourceKind.MANUAL),  # the revision names the curator
        )
        plan.add_fact(fact.bucket, card, reason)
        plan.commit(actor=actor, reason=reason or "added by hand")
    record(
        actor,
        AuditEvent.Action.ADD_FACT,
        target=card.id,
        user_id=fact.user_id,
        agent_name=fact.agent_name,
        reason=reason,
        project_id=fact.project_id,
        key=fact.key,
        source="manual",
        replaced=replaced,
    )
    return Added(card.id, True, replaced)
