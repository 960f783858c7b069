"""Ids and the folder names they become on disk (docs/design.md §4).

User and project ids become folder names that can never escape the memory root, agent
names are normalized to one spelling, fact ids are checked and created here, and a
fact's shard folder is derived from its id. Nothing here touches the disk.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from facts.storage.errors import InvalidId

DEFAULT_AGENT = "__default__"
MAX_ID_CHARS = 200
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_HASHED_TAIL = re.compile(r"-[0-9a-f]{16}$")
_AGENT = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
_FACT_ID = re.compile(r"^fact_[0-9a-f]{12}$")
# Longest readable prefix kept on disk; the hash keeps longer ids apart.
_SLUG_PREFIX = 64


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def normalize_id(raw: str, *, what: str = "id") -> str:
    """Map a user or project id to a folder name that can never escape the root.

    Safe ids are kept as they are. Anything else (unsafe characters, very long, or a
    safe id that merely looks like a hashed one) gets the unsafe characters replaced
    by ``-`` and the first 16 hex digits of SHA-256 of the raw id appended, so
    ``alice@example.com`` and ``alice.example.com`` never share a folder.
    """
    if not isinstance(raw, str) or raw == "":
        raise InvalidId(f"{what} must be a non-empty string")
    if len(raw) > MAX_ID_CHARS:
        raise InvalidId(f"{what} is longer than {MAX_ID_CHARS} characters")
    if "\x00" in raw:
        raise InvalidId(f"{what} contains a NUL character")
    safe = _UNSAFE.sub("-", raw)
    if safe == raw and len(raw) <= _SLUG_PREFIX and not _HASHED_TAIL.search(raw):
        return raw
    return f"{safe[:_SLUG_PREFIX]}-{_digest(raw)}"


def normalize_agent(raw: str | None) -> str:
    """Agent names are lower-case ``[a-z0-9-]+``; a missing one is ``__default__``."""
    if raw is None or (isinstance(raw, str) and raw.strip() == ""):
        return DEFAULT_AGENT
    if not isinstance(raw, str):
        raise InvalidId("agent_name must be a string")
    if raw == DEFAULT_AGENT:
        return raw
    name = raw.strip().lower()
    if not _AGENT.match(name):
        raise InvalidId("agent_name must be lower-case letters, digits and '-' (at most 64)")
    return name


def check_fact_id(fact_id: str) -> str:
    if not isinstance(fact_id, str) or not _FACT_ID.match(fact_id):
        raise InvalidId("fact id must be 'fact_' followed by 12 hex digits")
    return fact_id


def new_fact_id() -> str:
    return "fact_" + secrets.token_hex(6)


def shard(fact_id: str) -> str:
    return hashlib.sha256(fact_id.encode()).hexdigest()[:2]
