"""Writing the archive of one user: the card files and `memory.json` byte for byte (read
under the user's and the projects' locks, so the archive is one state of the files), the
history rows as JSON Lines with credentials masked, a README, `SHA256SUMS` and the
manifest; written through a temp file so it appears complete or not at all. Also the
counts the Export page shows and the audit entry of an export.
"""

from __future__ import annotations

import json
import os
import re
import stat
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import models

from facts.models import (
    AuditEvent,
    ExtractionRun,
    FactCard,
    FactRevision,
    FactUsage,
)
from facts.portability.archive import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    README,
    SUMS,
    Kind,
    chunks,
    files_under,
    history_kinds,
    sha256_of,
)
from facts.storage.cardfile import parse_card
from facts.storage.errors import CardParseError
from facts.storage.ids import normalize_id
from facts.storage.store import Bucket, Store, get_store

# Error texts can quote credentials (some servers echo the key they refused).
_SECRETS = re.compile(r"(?i)(bearer\s+)[^\s'\"]+|\b(sk|mem)[-_][A-Za-z0-9_-]{8,}")


def _user_rows(kind: Kind, user_id: str, fact_ids: Sequence[str]) -> list[models.QuerySet[Any]]:
    """The queries that together give the user's rows of `kind`, in a stable order."""
    manager = kind.model._default_manager
    if kind.model in (FactRevision, FactUsage):
        return [manager.filter(fact_id__in=chunk).order_by("pk") for chunk in chunks(sorted(fact_ids))]
    return [manager.filter(user_id=user_id).order_by("pk")]


# --- rows as JSON -----------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _redact(text: str) -> str:
    if not text:
        return text
    key = getattr(settings, "MEMORY_LLM_API_KEY", "") or ""
    if len(key) >= 4:
        text = text.replace(key, "[redacted]")
    return _SECRETS.sub(lambda m: (m.group(1) or "") + "[redacted]", text)


def _row_of(kind: Kind, obj: models.Model, names: dict[int, str]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for f in kind.model._meta.concrete_fields:
        value = f.value_from_object(obj)
        if f.name in kind.people:
            row[f.name] = names.get(value) if value is not None else None
            continue
        if f.name in kind.redact and isinstance(value, str):
            value = _redact(value)
        row[f.attname] = value
    return row


def _jsonl(rows: Iterable[dict[str, Any]]) -> bytes:
    return b"".join(
        json.dumps(row, ensure_ascii=False, default=_json_default, sort_keys=False).encode() + b"\n" for row in rows
    )


@dataclass
class ExportSummary:
    user_id: str
    counts: dict[str, int]
    bytes: int = 0
    path: Path | None = None


def default_filename(user_id: str, now: datetime | None = None) -> str:
    """A file name for the archive that is safe whatever the id holds (its folder name)."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"memory-export-{normalize_id(user_id, what='user_id')}-{stamp}.zip"


def _project_card_rows(user_id: str) -> list[tuple[str, str]]:
    """(fact id, project id) of the project cards whose source is one of the user's runs."""
    runs = [str(pk) for pk in ExtractionRun.objects.filter(user_id=user_id).values_list("pk", flat=True)]
    found: list[tuple[str, str]] = []
    for chunk in chunks(runs):
        found.extend(
            FactCard.objects.exclude(project_id="").filter(source_run_id__in=chunk).values_list("id", "project_id")
        )
    return sorted(set(found))


@dataclass
class _Collected:
    files: dict[str, bytes] = field(default_factory=dict)  # archive path → bytes
    kinds: dict[str, str] = field(default_factory=dict)  # archive path → kind
    cards: int = 0
    project_cards: int = 0
    profile: int = 0
    unreadable: list[str] = field(default_factory=list)


def _collect_files(store: Store, user_id: str) -> _Collected:
    out = _Collected()
    runs = {str(pk) for pk in ExtractionRun.objects.filter(user_id=user_id).values_list("pk", flat=True)}
    projects = _project_card_rows(user_id)
    buckets = [Bucket(user_id=user_id), *{Bucket(project_id=p) for _, p in projects}]
    # Under the locks of the user and of those projects: no commit lands half-way
    # through, so the archive is one consistent state of the files.
    with store.lock(*buckets):
        user_dir = store.user_dir(user_id)
        for path in files_under(user_dir / "agents"):
            rel = store.relative(path)
            data = path.read_bytes()
            out.files[rel], out.kinds[rel] = data, "card"
            out.cards += 1
            try:
                parse_card(data.decode("utf-8"), path)
            except (CardParseError, UnicodeDecodeError):
                out.unreadable.append(rel)
        profile = store.profile_path(user_id)
        if profile.is_file():
            rel = store.relative(profile)
            out.files[rel], out.kinds[rel] = profile.read_bytes(), "profile"
            out.profile = 1
        for fact_id, project_id in projects:
            path = store.path_for(Bucket(project_id=project_id), fact_id)
            try:
                data = path.read_bytes()
                card = parse_card(data.decode("utf-8"), path)
            except (FileNotFoundError, CardParseError, UnicodeDecodeError):
                continue  # the mirror is behind the files; the files are the truth
            if card.source.run_id not in runs:
                continue
            rel = store.relative(path)
            out.files[rel], out.kinds[rel] = data, "project_card"
            out.project_cards += 1
    return out


def export_user(
    user_id: str,
    out: str | Path | IO[bytes],
    *,
    overwrite: bool = False,
    store: Store | None = None,
    now: datetime | None = None,
) -> ExportSummary:
    """Write one zip archive with everything held about `user_id` to `out`.

    `out` is a binary file object or a path; a path is written through a temp file beside
    it and appears complete or not at all, and an existing file is only replaced with
    `overwrite` (else FileExistsError).
    """
    store = store or get_store()
    normalize_id(user_id, what="user_id")
    now = (now or datetime.now(UTC)).replace(microsecond=0)
    collected = _collect_files(store, user_id)
    card_ids = [Path(rel).stem for rel, kind in collected.kinds.items() if kind != "profile"]
    names = dict(get_user_model()._default_manager.values_list("pk", get_user_model().USERNAME_FIELD))
    counts: dict[str, int] = {
        "cards": collected.cards,
        "project_cards": collected.project_cards,
        "profile": collected.profile,
    }
    history: dict[str, bytes] = {}
    for kind in history_kinds():
        rows = [
            _row_of(kind, obj, names)
            for query in _user_rows(kind, user_id, card_ids)
            for obj in query.iterator(chunk_size=2000)
        ]
        history[kind.file] = _jsonl(rows)
        counts[kind.name] = len(rows)

    files: dict[str, bytes] = {README: _readme(user_id, counts, now).encode()}
    files.update(collected.files)
    files.update(history)
    kinds = {README: "readme", **collected.kinds, **{name: "history" for name in history}}
    entries = {
        name: {"kind": kinds[name], "bytes": len(data), "sha256": sha256_of(data)} for name, data in files.items()
    }
    files[SUMS] = "".join(f"{e['sha256']}  {name}\n" for name, e in entries.items()).encode()
    entries[SUMS] = {"kind": "checksums", "bytes": len(files[SUMS]), "sha256": sha256_of(files[SUMS])}
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created_at": now.isoformat().replace("+00:00", "Z"),
        "user_id": user_id,
        "user_folder": store.relative(store.user_dir(user_id)),
        "counts": counts,
        "unreadable_cards": collected.unreadable,
        "files": entries,
    }
    files[MANIFEST] = (json.dumps(manifest, ensure_ascii=False, indent=2) + "\n").encode()

    summary = ExportSummary(user_id=user_id, counts=counts)
    if isinstance(out, str | Path):
        summary.path = Path(out)
        summary.bytes = _write_file(Path(out), files, now, overwrite=overwrite)
    else:
        start = out.tell() if out.seekable() else 0
        _write_zip(out, files, now)
        summary.bytes = (out.tell() - start) if out.seekable() else 0
    return summary


def _write_zip(out: IO[bytes], files: dict[str, bytes], now: datetime) -> None:
    stamp = now.timetuple()[:6]
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        # The manifest and the README first: someone opening the archive sees them on top.
        order = [MANIFEST, README] + [name for name in files if name not in (MANIFEST, README)]
        for name in order:
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            zf.writestr(info, files[name])


def _write_file(path: Path, files: dict[str, bytes], now: datetime, *, overwrite: bool) -> int:
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists")
    tmp = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    try:
        with open(tmp, "xb") as fh:
            _write_zip(fh, files, now)
            fh.flush()
            os.fsync(fh.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if the file appeared meanwhile: never clobbered
    finally:
        if tmp.exists():
            tmp.unlink()
    return path.stat().st_size


def audit_export(actor: str, summary: ExportSummary) -> AuditEvent:
    """The audit entry of an export: who, when, which user and how many of each kind;
    never what the archive holds."""
    return AuditEvent.objects.create(
        actor=actor,
        action=AuditEvent.Action.EXPORT,
        user_id=summary.user_id,
        target=summary.user_id,
        details={"counts": summary.counts, "bytes": summary.bytes},
    )


def export_counts(user_id: str, *, store: Store | None = None) -> dict[str, int]:
    """What an export of `user_id` would hold, counted without reading the files' text."""
    store = store or get_store()
    cards = sum(1 for _ in files_under(store.user_dir(user_id) / "agents"))
    projects = _project_card_rows(user_id)
    counts = {
        "cards": cards,
        "project_cards": len(projects),
        "profile": int(store.profile_path(user_id).is_file()),
    }
    fact_ids = list(FactCard.objects.filter(user_id=user_id).values_list("id", flat=True))
    fact_ids += [fact_id for fact_id, _ in projects]
    for kind in history_kinds():
        counts[kind.name] = sum(query.count() for query in _user_rows(kind, user_id, fact_ids))
    return counts


def _readme(user_id: str, counts: dict[str, int], now: datetime) -> str:
    folder = "users/" + normalize_id(user_id, what="user_id")
    listed = "\n".join(f"  {name:<20} {count}" for name, count in counts.items())
    return f"""\
Everything this memory service holds about one user
===================================================

User id:    {user_id}
Created at: {now.isoformat().replace("+00:00", "Z")} (UTC)
Format:     {FORMAT} version {FORMAT_VERSION}

What is inside (counts):
{listed}

Layout (paths are the same as in the service's memory folder):

  {folder}/memory.json
      The profile: JSON with "user" (workContext, personalContext, topOfMind,
      cognitiveStyle) and "history" (recentMonths, earlierContext, longTermBackground);
      each section has a summary, when it was updated and where it came from.
  {folder}/agents/<agent>/facts/<xx>/<fact_id>.md
      One remembered fact per file: YAML front matter (id, key, category, status,
      confidence, dates, source with the quoted evidence, revision) between two
      "---" lines, then the fact itself as text. Superseded and expired facts are
      included: they are still held.
  projects/<project>/facts/<xx>/<fact_id>.md
      Project facts whose evidence came from this user's conversations.
  history/*.jsonl
      One JSON object per line, one line per database row:
        runs.jsonl                extraction runs: the filtered conversation the model
                                  saw, its raw answer, status and timings (no
                                  credentials: error texts are masked)
        turns.jsonl               the conversations as the agents sent them (messages)
        candidates.jsonl          every fact or summary the model proposed, the verdict
                                  (accepted / rejected), the reason codes, the review
        extracted_messages.jsonl  message ids already read, so none is read twice
        fact_revisions.jsonl      every past version of each fact file
        profile_revisions.jsonl   every past version of memory.json
        usage.jsonl               how often each fact was shown to an agent or found
        golden_queries.jsonl      saved search checks of this user's memory
        audit.jsonl               who curated this memory, when and why
  SHA256SUMS      the SHA-256 of every file: `sha256sum -c SHA256SUMS`
  manifest.json   format version, counts, creation time and the SHA-256 and size of
                  every file (the same list)

Every text file is UTF-8. Times are ISO 8601. Nothing here needs this software to be
read; `manage.py import` of the service restores it into a store without this user.
"""
