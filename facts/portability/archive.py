"""What an export archive is, shared by `export` and `importer`: the format's name and
version, the names of its fixed files, the kinds of history rows it carries (which
model, which file, how each comes back), and the small helpers both sides use.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import models

from facts.models import (
    AuditEvent,
    Candidate,
    ExtractedMessage,
    ExtractionRun,
    FactRevision,
    FactUsage,
    ProfileRevision,
    Turn,
)

FORMAT = "memory-curation/user-export"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
README = "README.txt"
SUMS = "SHA256SUMS"


# --- the history kinds ------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """One kind of history row: which model, which file, how it comes back on import."""

    name: str
    model: type[models.Model]
    # Rows keep their primary keys on import: other records name them (cards name their
    # run, the review page its candidate id), so they must not be renumbered.
    keep_ids: bool = False
    restore: bool = True
    # Rows already in the target with the same natural key are kept, the archive's skipped.
    natural_key: tuple[str, ...] = ()
    # Fields exported as a login name instead of a user row's id.
    people: tuple[str, ...] = ()
    # Text fields that can hold an error message: credentials are masked.
    redact: tuple[str, ...] = ()

    @property
    def file(self) -> str:
        return f"history/{self.name}.jsonl"


KINDS: tuple[Kind, ...] = (
    Kind("runs", ExtractionRun, keep_ids=True, redact=("error",)),
    Kind("turns", Turn, keep_ids=True, redact=("error",)),
    Kind("candidates", Candidate, keep_ids=True, people=("reviewed_by",)),
    Kind("extracted_messages", ExtractedMessage, natural_key=("user_id", "agent_name", "thread_id", "message_id")),
    Kind("fact_revisions", FactRevision, natural_key=("fact_id", "revision")),
    Kind("profile_revisions", ProfileRevision, natural_key=("user_id", "revision")),
    Kind("usage", FactUsage, keep_ids=True, natural_key=("fact_id",)),
    # Who curated this user's memory and when: exported for the person to read, not
    # imported (the audit log of the target records the import itself).
    Kind("audit", AuditEvent, restore=False),
)


def _golden_kind() -> Kind | None:
    """Saved search checks of the user's scope live in the read side's app; the write
    side reads them through the app registry instead of importing `retrieval`."""
    from django.apps import apps

    try:
        model = apps.get_model("retrieval", "GoldenQuery")
    except LookupError:
        return None
    return Kind("golden_queries", model, people=("created_by",))


def history_kinds() -> list[Kind]:
    golden = _golden_kind()
    return [*KINDS, golden] if golden else list(KINDS)


# Ids per `__in` query: SQLite allows 32,766 parameters in one statement.
_IN_CHUNK = 900


def chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), _IN_CHUNK):
        yield items[start : start + _IN_CHUNK]


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def files_under(folder: Path) -> Iterator[Path]:
    """Every file below `folder` in a stable order, without temp files and dot folders."""
    if not folder.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(".md") and not name.startswith("."):
                yield Path(dirpath) / name
