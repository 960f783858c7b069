"""Export and import of everything held about one user (issue 15, point 2).

`export_user` writes one zip archive that can be read without this software: the
user's card files and ``memory.json`` at the same relative paths as under
``MEMORY_ROOT`` (byte for byte), the project cards whose evidence came from the
user's conversations, the history rows as JSON Lines under ``history/``, a
``README.txt`` that explains it all, ``SHA256SUMS`` (for ``sha256sum -c``) and a
``manifest.json`` (format version, counts, creation time, SHA-256 of every file).

`import_archive` restores such an archive into a store where the user has no memory:
the whole archive is read and checked first (manifest, hashes, paths, sizes, every
card, the profile and every row), and only then is anything written — cards through
`facts.writer.commit` and the profile through `facts.writer.commit_profile`, so mirror,
history and index follow as for any other write. A refused archive changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.color import no_style
from django.db import connection, models

from . import writer
from .cardfile import Card, parse_card
from .errors import CardParseError, InvalidId
from .ids import normalize_id
from .models import (
    AuditEvent,
    Candidate,
    ExtractedMessage,
    ExtractionRun,
    FactCard,
    FactRevision,
    FactUsage,
    ProfileRevision,
    ProfileSection,
    Turn,
)
from .profilefile import Profile, parse_profile
from .store import Bucket, Store, get_store

FORMAT = "memory-curation/user-export"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
README = "README.txt"
SUMS = "SHA256SUMS"

# Bounds on what an archive may make the importer read (zip bombs, absurd archives).
MAX_MEMBERS = 200_000
MAX_MEMBER_BYTES = 256 * 1024 * 1024
MAX_TOTAL_BYTES = 1024 * 1024 * 1024
# A member inflating more than this many times its compressed size is refused once it
# is bigger than a mebibyte; JSON Lines and Markdown compress 5–20×, bombs 1,000×.
MAX_RATIO = 200

_CHUNK = 1024 * 1024
_SEGMENT = r"[A-Za-z0-9_-]+"
_USER_CARD = re.compile(rf"users/({_SEGMENT})/agents/([a-z0-9_-]+)/facts/([0-9a-f]{{2}})/(fact_[0-9a-f]{{12}})\.md")
_PROJECT_CARD = re.compile(rf"projects/({_SEGMENT})/facts/([0-9a-f]{{2}})/(fact_[0-9a-f]{{12}})\.md")
_PROFILE = re.compile(rf"users/({_SEGMENT})/memory\.json")
# Error texts can quote credentials (some servers echo the key they refused).
_SECRETS = re.compile(r"(?i)(bearer\s+)[^\s'\"]+|\b(sk|mem)[-_][A-Za-z0-9_-]{8,}")


class ImportRefused(Exception):
    """The archive cannot be imported here; nothing was changed."""


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


def _kinds() -> list[Kind]:
    golden = _golden_kind()
    return [*KINDS, golden] if golden else list(KINDS)


# Ids per `__in` query: SQLite allows 32,766 parameters in one statement.
_IN_CHUNK = 900


def _chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), _IN_CHUNK):
        yield items[start : start + _IN_CHUNK]


def _user_rows(kind: Kind, user_id: str, fact_ids: Sequence[str]) -> list[models.QuerySet[Any]]:
    """The queries that together give the user's rows of `kind`, in a stable order."""
    manager = kind.model._default_manager
    if kind.model in (FactRevision, FactUsage):
        return [manager.filter(fact_id__in=chunk).order_by("pk") for chunk in _chunks(sorted(fact_ids))]
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


# --- export -----------------------------------------------------------------------


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


def _files_under(folder: Path) -> Iterator[Path]:
    """Every file below `folder` in a stable order, without temp files and dot folders."""
    if not folder.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(".md") and not name.startswith("."):
                yield Path(dirpath) / name


def _project_card_rows(user_id: str) -> list[tuple[str, str]]:
    """(fact id, project id) of the project cards whose source is one of the user's runs."""
    runs = [str(pk) for pk in ExtractionRun.objects.filter(user_id=user_id).values_list("pk", flat=True)]
    found: list[tuple[str, str]] = []
    for chunk in _chunks(runs):
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
        for path in _files_under(user_dir / "agents"):
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
    for kind in _kinds():
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
    entries = {name: {"kind": kinds[name], "bytes": len(data), "sha256": _sha(data)} for name, data in files.items()}
    files[SUMS] = "".join(f"{e['sha256']}  {name}\n" for name, e in entries.items()).encode()
    entries[SUMS] = {"kind": "checksums", "bytes": len(files[SUMS]), "sha256": _sha(files[SUMS])}
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


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_zip(out: IO[bytes], files: dict[str, bytes], now: datetime) -> None:
    stamp = now.timetuple()[:6]
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        # The manifest and the README first: someone opening the archive sees them on top.
        order = [MANIFEST, README] + [name for name in files if name not in (MANIFEST, README)]
        for name in order:
            info = zipfile.ZipInfo(name, date_time=stamp)  # type: ignore[arg-type]
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
    cards = sum(1 for _ in _files_under(store.user_dir(user_id) / "agents"))
    projects = _project_card_rows(user_id)
    counts = {
        "cards": cards,
        "project_cards": len(projects),
        "profile": int(store.profile_path(user_id).is_file()),
    }
    fact_ids = list(FactCard.objects.filter(user_id=user_id).values_list("id", flat=True))
    fact_ids += [fact_id for fact_id, _ in projects]
    for kind in _kinds():
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


# --- import -----------------------------------------------------------------------


@dataclass
class Archive:
    """A validated archive: everything read, checked and parsed; nothing written yet."""

    user_id: str
    manifest: dict[str, Any]
    cards: list[tuple[str, Card, bytes]] = field(default_factory=list)  # (path, card, bytes)
    project_cards: list[tuple[str, Card, bytes]] = field(default_factory=list)
    profile: Profile | None = None
    profile_bytes: bytes = b""
    rows: dict[str, list[models.Model]] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        counts = {
            "cards": len(self.cards),
            "project_cards": len(self.project_cards),
            "profile": int(bool(self.profile)),
        }
        counts.update({name: len(rows) for name, rows in self.rows.items()})
        return counts


@dataclass
class ImportSummary:
    user_id: str
    restored: dict[str, int]
    skipped: dict[str, int]


def _safe_name(name: str) -> bool:
    if not name or len(name) > 400 or "\\" in name or "\x00" in name or name.startswith("/"):
        return False
    if re.match(r"^[A-Za-z]:", name):
        return False
    parts = name.rstrip("/").split("/")
    return all(part not in ("", ".", "..") for part in parts)


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    """The member's bytes, never more than its declared size nor `limit`."""
    out = bytearray()
    with zf.open(info) as fh:
        while chunk := fh.read(_CHUNK):
            out += chunk
            if len(out) > min(info.file_size, limit):
                raise ImportRefused(f"{info.filename}: holds more bytes than declared")
    return bytes(out)


def read_archive(source: str | Path | IO[bytes]) -> Archive:
    """Open, bound, hash-check and parse an archive; ImportRefused says what is wrong."""
    try:
        zf = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ImportRefused(f"not a readable zip archive ({exc})") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            raise ImportRefused(f"the archive has {len(infos)} entries; at most {MAX_MEMBERS} are accepted")
        members: dict[str, zipfile.ZipInfo] = {}
        total = 0
        for info in infos:
            name = info.filename
            if not _safe_name(name):
                raise ImportRefused(f"unsafe path in the archive: {name!r} (absolute, '..', or not a plain path)")
            mode = info.external_attr >> 16
            if mode and stat.S_ISLNK(mode):
                raise ImportRefused(f"{name}: symbolic links are not accepted")
            if info.flag_bits & 0x1:
                raise ImportRefused(f"{name}: encrypted entries are not accepted")
            if info.is_dir():
                continue
            if name in members:
                raise ImportRefused(f"{name} appears twice in the archive")
            if info.file_size > MAX_MEMBER_BYTES:
                raise ImportRefused(f"{name}: {info.file_size} bytes, more than {MAX_MEMBER_BYTES} per file")
            if info.file_size > _CHUNK and info.file_size > MAX_RATIO * max(info.compress_size, 1):
                raise ImportRefused(f"{name}: compressed {info.file_size // max(info.compress_size, 1)}× (zip bomb?)")
            total += info.file_size
            if total > MAX_TOTAL_BYTES:
                raise ImportRefused(f"the archive unpacks to more than {MAX_TOTAL_BYTES} bytes")
            members[name] = info
        if MANIFEST not in members:
            raise ImportRefused("no manifest.json: this is not an export of this service")
        try:
            raw = _read_member(zf, members[MANIFEST], 64 * 1024 * 1024)
            manifest = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise ImportRefused("manifest.json is not valid JSON") from None
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise ImportRefused(f"manifest.json cannot be read ({exc})") from None
        user_id, listed = _check_manifest(manifest)
        unlisted = sorted(set(members) - set(listed) - {MANIFEST})
        if unlisted:
            raise ImportRefused(f"files not listed in the manifest: {', '.join(unlisted[:5])}")
        contents: dict[str, bytes] = {}
        for name, entry in listed.items():
            if name not in members:
                raise ImportRefused(f"{name} is listed in the manifest but missing from the archive")
            try:
                data = _read_member(zf, members[name], MAX_MEMBER_BYTES)
            except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
                raise ImportRefused(f"{name} cannot be read ({exc})") from None
            if len(data) != entry["bytes"] or _sha(data) != entry["sha256"]:
                raise ImportRefused(f"{name}: its SHA-256 does not match the manifest (changed or damaged)")
            contents[name] = data
    return _parse(user_id, manifest, contents)


def _check_manifest(manifest: Any) -> tuple[str, dict[str, dict[str, Any]]]:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ImportRefused("manifest.json does not describe an export of this service")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise ImportRefused(f"format version {version!r} is not supported (this version reads {FORMAT_VERSION})")
    user_id = manifest.get("user_id")
    try:
        normalize_id(user_id, what="user_id")
    except InvalidId as exc:
        raise ImportRefused(f"manifest.json: {exc}") from None
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise ImportRefused("manifest.json has no file list")
    for name, entry in files.items():
        ok = (
            isinstance(entry, dict)
            and isinstance(entry.get("sha256"), str)
            and re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])
            and type(entry.get("bytes")) is int
        )
        if not ok:
            raise ImportRefused(f"manifest.json: the entry of {name!r} has no valid sha256 and size")
        if not isinstance(name, str) or not _safe_name(name):
            raise ImportRefused(f"unsafe path in the manifest: {name!r}")
    return user_id, files


def _parse(user_id: str, manifest: dict[str, Any], contents: dict[str, bytes]) -> Archive:
    archive = Archive(user_id=user_id, manifest=manifest)
    folder = normalize_id(user_id, what="user_id")
    store = Store(Path("/nonexistent-root"))  # only for the paths a card belongs at
    history: dict[str, bytes] = {}
    for name, data in contents.items():
        if name in (README, SUMS):
            continue
        if name.startswith("history/"):
            if name not in {kind.file for kind in _kinds()}:
                raise ImportRefused(f"{name}: unknown history file")
            history[name] = data
            continue
        if m := _PROFILE.fullmatch(name):
            if m.group(1) != folder:
                raise ImportRefused(f"{name}: outside this user's folder users/{folder}/")
            text = _text(name, data)
            try:
                archive.profile = parse_profile(text, Path(name))
            except CardParseError as exc:
                raise ImportRefused(f"{name}: {exc.message}") from None
            if archive.profile.user_id != user_id:
                raise ImportRefused(f"{name}: the profile belongs to another user")
            archive.profile_bytes = data
            continue
        user_card, project_card = _USER_CARD.fullmatch(name), _PROJECT_CARD.fullmatch(name)
        if user_card is None and project_card is None:
            raise ImportRefused(f"{name}: not a place this archive may write (only this user's folder)")
        if user_card is not None and user_card.group(1) != folder:
            raise ImportRefused(f"{name}: outside this user's folder users/{folder}/")
        try:
            card = parse_card(_text(name, data), Path(name))
        except CardParseError as exc:
            raise ImportRefused(f"{name}: {exc.message}") from None
        if user_card is not None and card.user_id != user_id:
            raise ImportRefused(f"{name}: the card belongs to another user")
        if project_card is not None and not card.is_project:
            raise ImportRefused(f"{name}: a user's card in a project folder")
        try:
            expected = store.relative(store.card_path(card))
        except InvalidId as exc:
            raise ImportRefused(f"{name}: {exc}") from None
        if expected != name:
            raise ImportRefused(f"{name}: the card says it belongs at {expected}")
        (archive.cards if user_card is not None else archive.project_cards).append((name, card, data))
    ids = [card.id for _, card, _ in archive.cards + archive.project_cards]
    if len(set(ids)) != len(ids):
        raise ImportRefused("the same fact id appears twice in the archive")
    archive.rows = _parse_history(archive, history)
    runs = {str(row.pk) for row in archive.rows.get("runs", [])}
    for name, card, _ in archive.project_cards:
        if card.source.run_id not in runs:
            raise ImportRefused(f"{name}: a project card whose source is not one of this user's runs")
    return archive


def _text(name: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ImportRefused(f"{name}: not UTF-8 text") from None


def _parse_history(archive: Archive, history: dict[str, bytes]) -> dict[str, list[models.Model]]:
    people = dict(get_user_model()._default_manager.values_list(get_user_model().USERNAME_FIELD, "pk"))
    fact_ids = {card.id for _, card, _ in archive.cards + archive.project_cards}
    out: dict[str, list[models.Model]] = {}
    for kind in _kinds():
        if not kind.restore:
            continue
        data = history.get(kind.file, b"")
        objs: list[models.Model] = []
        for number, line in enumerate(_text(kind.file, data).splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{kind.file} line {number}"
            try:
                row = json.loads(line)
            except ValueError:
                raise ImportRefused(f"{where}: not JSON") from None
            if not isinstance(row, dict):
                raise ImportRefused(f"{where}: not a JSON object")
            obj = _build(kind, row, where, people)
            owner = getattr(obj, "user_id", None) if kind.model not in (FactRevision, FactUsage) else None
            if owner is not None and owner != archive.user_id:
                raise ImportRefused(f"{where}: a row of another user")
            if kind.model in (FactRevision, FactUsage) and obj.fact_id not in fact_ids:  # type: ignore[attr-defined]
                raise ImportRefused(f"{where}: names a fact that is not in the archive")
            objs.append(obj)
        out[kind.name] = objs
    runs = {obj.pk for obj in out.get("runs", [])}
    for name in ("turns", "candidates", "extracted_messages"):
        for obj in out.get(name, []):
            run_id = obj.run_id  # type: ignore[attr-defined]
            if run_id is not None and run_id not in runs:
                raise ImportRefused(f"history/{name}.jsonl: a row names run {run_id}, which is not in the archive")
    for name in ("runs", "turns", "candidates"):
        pks = [obj.pk for obj in out.get(name, [])]
        if len(set(pks)) != len(pks):
            raise ImportRefused(f"history/{name}.jsonl: the same id appears twice")
    return out


def _build(kind: Kind, row: dict[str, Any], where: str, people: dict[str, int]) -> models.Model:
    """A model instance from an exported row, every field checked the way the model
    declares it (type, length, choices, null)."""
    obj = kind.model()
    for f in kind.model._meta.concrete_fields:
        if f.name in kind.people:
            name = row.get(f.name)
            setattr(obj, f.attname, people.get(name) if isinstance(name, str) else None)
            continue
        if f.primary_key and not kind.keep_ids:
            setattr(obj, f.attname, None)
            continue
        if f.attname not in row:
            if f.primary_key:
                raise ImportRefused(f"{where}: no {f.attname}")
            continue  # a field added after the export keeps its default
        raw = row[f.attname]
        try:
            value = f.to_python(raw)
            if value is None:
                if not f.null and not f.primary_key:
                    raise ValidationError("may not be null")
            else:
                if isinstance(f, models.JSONField):
                    json.dumps(value)
                elif isinstance(value, str):
                    value.encode("utf-8")
                f.run_validators(value)
                blank_ok = f.blank and value in f.empty_values
                if f.choices and not blank_ok and value not in {c[0] for c in f.flatchoices}:
                    raise ValidationError(f"{value!r} is not one of the allowed values")
                if isinstance(value, datetime) and value.tzinfo is None:
                    raise ValidationError("a time without its time zone")
        except ValidationError as exc:
            raise ImportRefused(f"{where}: {f.attname}: {'; '.join(exc.messages)}") from None
        except (TypeError, ValueError, UnicodeEncodeError) as exc:
            raise ImportRefused(f"{where}: {f.attname}: {exc}") from None
        setattr(obj, f.attname, value)
    return obj


def _user_has_memory(store: Store, user_id: str) -> str | None:
    cards = sum(1 for _ in _files_under(store.user_dir(user_id) / "agents"))
    profile = store.profile_path(user_id).is_file()
    if cards or profile:
        what = f"{cards} card file(s)" + (" and a memory.json" if profile else "")
        return f"{what} under {store.relative(store.user_dir(user_id))}/"
    rows = FactCard.objects.filter(user_id=user_id).count() + ProfileSection.objects.filter(user_id=user_id).count()
    if rows:
        return f"{rows} mirror row(s) without files (run `manage.py reindex` first)"
    return None


def _plan(archive: Archive, store: Store, *, history: bool) -> tuple[list[tuple[str, Card, bytes]], dict[str, int]]:
    """Check the target; returns the project cards to write and what is skipped."""
    user_id = archive.user_id
    held = _user_has_memory(store, user_id)
    if held:
        raise ImportRefused(
            f"user {user_id!r} already has memory here: {held}. Import only restores into an empty place."
        )
    skipped: dict[str, int] = {}
    projects: list[tuple[str, Card, bytes]] = []
    for name, card, data in archive.project_cards:
        path = store.root / name
        if path.exists():
            if path.read_bytes() != data:
                raise ImportRefused(f"{name} exists here with other content")
            skipped["project_cards"] = skipped.get("project_cards", 0) + 1
            continue
        projects.append((name, card, data))
    ids = [card.id for _, card, _ in archive.cards + projects]
    taken = [
        fact_id
        for chunk in _chunks(ids)
        for fact_id in FactCard.objects.filter(id__in=chunk).values_list("id", flat=True)
    ]
    if taken:
        raise ImportRefused(f"fact id(s) already used here by other cards: {', '.join(taken[:5])}")
    if history:
        for kind in _kinds():
            if not kind.keep_ids or kind.natural_key:
                continue
            pks = [obj.pk for obj in archive.rows.get(kind.name, [])]
            manager = kind.model._default_manager
            clash = [
                str(pk) for chunk in _chunks(pks) for pk in manager.filter(pk__in=chunk).values_list("pk", flat=True)
            ]
            if clash:
                raise ImportRefused(
                    f"{kind.name} id(s) {', '.join(clash[:5])} are already used in this database; "
                    "import with --skip-history to restore the cards and the profile only"
                )
    return projects, skipped


def _existing_keys(kind: Kind, objs: list[models.Model]) -> set[tuple[Any, ...]]:
    if not objs:
        return set()
    first = kind.natural_key[0]
    values = sorted({getattr(obj, first) for obj in objs})
    manager = kind.model._default_manager
    return {
        tuple(row)
        for chunk in _chunks(values)
        for row in manager.filter(**{f"{first}__in": chunk}).values_list(*kind.natural_key)
    }


def _restore_rows(archive: Archive, skipped: dict[str, int]) -> Callable[[], None]:
    def record() -> None:
        for kind in _kinds():
            objs = archive.rows.get(kind.name, [])
            if kind.natural_key:
                existing = _existing_keys(kind, objs)
                fresh = [o for o in objs if tuple(getattr(o, n) for n in kind.natural_key) not in existing]
                if len(fresh) != len(objs):
                    skipped[kind.name] = len(objs) - len(fresh)
                objs = fresh
            for obj in objs:
                # raw: the rows keep their own timestamps (auto_now_add would stamp now),
                # as `loaddata` does.
                obj.save_base(raw=True, force_insert=True)
        # Rows inserted with their own ids leave PostgreSQL's sequences behind them.
        statements = connection.ops.sequence_reset_sql(
            no_style(), [k.model for k in _kinds() if k.keep_ids and k.model is not FactUsage]
        )
        with connection.cursor() as cursor:
            for sql in statements:
                cursor.execute(sql)

    return record


def import_archive(
    source: str | Path | IO[bytes],
    *,
    actor: str,
    history: bool = True,
    check_only: bool = False,
    store: Store | None = None,
) -> ImportSummary:
    """Restore an archive made by `export_user` into a store where its user has no memory.

    Everything is validated before the first write (ImportRefused: nothing changed).
    Cards go through `writer.commit` (one batch; the history rows commit in the same
    transaction as their mirror rows), then the profile through `writer.commit_profile`.
    `history=False` restores the cards and the profile only; `check_only` stops after
    the checks.
    """
    store = store or get_store()
    archive = read_archive(source)
    if not history:
        archive.rows = {}
    projects, skipped = _plan(archive, store, history=history)
    restored = archive.counts()
    restored["project_cards"] = len(projects)
    if check_only:
        return ImportSummary(archive.user_id, restored, skipped)
    skipped_projects = skipped.pop("project_cards", 0)
    puts = [writer.Put(card, expected_revision=None) for _, card, _ in archive.cards + projects]
    reason = f"import of an export made {archive.manifest.get('created_at', '?')}"
    writer.commit(puts, actor=actor, reason=reason, store=store, record=_restore_rows(archive, skipped))
    if archive.profile is not None:
        profile = archive.profile
        writer.commit_profile(
            archive.user_id, lambda _current: profile, actor=actor, reason=reason, store=store, restore=True
        )
    for name, count in skipped.items():
        restored[name] -= count
    if skipped_projects:
        skipped["project_cards"] = skipped_projects
    AuditEvent.objects.create(
        actor=actor,
        action=AuditEvent.Action.IMPORT,
        user_id=archive.user_id,
        target=archive.user_id,
        details={"restored": restored, "skipped": skipped},
    )
    return ImportSummary(archive.user_id, restored, skipped)


__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "Archive",
    "ExportSummary",
    "ImportRefused",
    "ImportSummary",
    "audit_export",
    "default_filename",
    "export_counts",
    "export_user",
    "import_archive",
    "read_archive",
]
