"""Reading an export archive and checking all of it before anything is written: the zip
is bounded (entries, sizes, ratio), every member hash-checked against the manifest, and
every path, card, profile and history row parsed and checked (`read_archive`). What it
finds wrong is an `ImportRefused`; `facts.portability.importer` writes what passed.
"""

from __future__ import annotations

import json
import re
import stat
import zipfile
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any, cast

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import models

from facts import tenancy
from facts.intake.sanitize import CONTROL_CHARS, MAX_JSON_DEPTH, NotJson, check_json
from facts.intake.turns import TurnRejected, clean_agent, clean_id, clean_turn
from facts.models import (
    FactRevision,
    FactUsage,
    Turn,
)
from facts.portability.archive import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    README,
    SUMS,
    Kind,
    history_kinds,
    sha256_of,
)
from facts.storage.cardfile import Card, parse_card
from facts.storage.errors import CardParseError, InvalidId
from facts.storage.fileread import too_large
from facts.storage.ids import normalize_id
from facts.storage.profilefile import Profile, parse_profile
from facts.storage.store import Store

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


class ImportRefused(Exception):
    """The archive cannot be imported here; nothing was changed."""


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


def _safe_name(name: str) -> bool:
    if not name or len(name) > 400 or "\\" in name or "\x00" in name or name.startswith("/"):
        return False
    if re.match(r"^[A-Za-z]:", name):
        return False
    parts = name.rstrip("/").split("/")
    return all(part not in ("", ".", "..") for part in parts)


# What each kind of member may weigh, checked against the sizes the zip's directory
# declares before a byte is inflated (and again while reading: never more than declared).
# Coarse, before inflating: the memory files' own bounds (MEMORY_MAX_CARD_BYTES, a
# setting) are checked on each member read (`_parse_member`).
MAX_CARD_BYTES = 256 * 1024
MAX_PROFILE_BYTES = 16 * 1024 * 1024
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
MAX_README_BYTES = 1024 * 1024


def _kind_of(name: str) -> tuple[str, int, str | None]:
    """(kind, most bytes, the user folder it names) of a member, by its name alone;
    ImportRefused for a name no export ever holds."""
    if name == MANIFEST:
        return "manifest", MAX_MANIFEST_BYTES, None
    if name == README:
        return "readme", MAX_README_BYTES, None
    if name == SUMS:
        return "sums", MAX_MANIFEST_BYTES, None
    if name.startswith("history/"):
        if name not in {kind.file for kind in history_kinds()}:
            raise ImportRefused(f"{name}: unknown history file")
        return "history", MAX_MEMBER_BYTES, None
    if m := _PROFILE.fullmatch(name):
        return "profile", MAX_PROFILE_BYTES, m.group(1)
    if m := _USER_CARD.fullmatch(name):
        return "card", MAX_CARD_BYTES, m.group(1)
    if _PROJECT_CARD.fullmatch(name):
        return "project_card", MAX_CARD_BYTES, None
    raise ImportRefused(f"{name}: not a place this archive may write (only this user's folder)")


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    """The member's bytes, never more than its declared size nor `limit`."""
    out = bytearray()
    with zf.open(info) as fh:
        while chunk := fh.read(_CHUNK):
            out += chunk
            if len(out) > min(info.file_size, limit):
                raise ImportRefused(f"{info.filename}: holds more bytes than declared")
    return bytes(out)


def _directory(zf: zipfile.ZipFile) -> tuple[dict[str, tuple[zipfile.ZipInfo, str]], str | None]:
    """Every member's name, kind and declared size checked from the zip's directory,
    before anything is inflated: {name: (info, kind)} and the one user folder named."""
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise ImportRefused(f"the archive has {len(infos)} entries; at most {MAX_MEMBERS} are accepted")
    members: dict[str, tuple[zipfile.ZipInfo, str]] = {}
    folder: str | None = None
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
        kind, limit, user_folder = _kind_of(name)
        if user_folder is not None:
            if folder is not None and user_folder != folder:
                raise ImportRefused(f"{name}: outside this user's folder users/{folder}/")
            folder = user_folder
        if info.file_size > limit:
            what = {"card": "a card", "project_card": "a card", "profile": "a profile"}.get(kind, "allowed")
            raise ImportRefused(f"{name}: {info.file_size} bytes, larger than {what} may be ({limit} bytes)")
        if info.file_size > _CHUNK and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise ImportRefused(f"{name}: compressed {info.file_size // max(info.compress_size, 1)}× (zip bomb?)")
        total += info.file_size
        if total > MAX_TOTAL_BYTES:
            raise ImportRefused(f"the archive unpacks to more than {MAX_TOTAL_BYTES} bytes")
        members[name] = (info, kind)
    return members, folder


def _json(where: str, text: str) -> Any:
    """JSON as an export writes it: one line for deep nesting, NaN or broken Unicode."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ImportRefused(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError:
        raise ImportRefused(f"{where}: not JSON") from None
    try:
        check_json(value)
    except NotJson as exc:
        raise ImportRefused(f"{where}: {exc.field}: {exc.message}") from None
    return value


def _no_controls(where: str, value: Any, path: str = "") -> None:
    """No control character anywhere (tab and line breaks aside), the rule of what every
    door stores: a NUL or an ESC must never reach a card file, a row or the memory block."""
    if isinstance(value, str):
        if found := CONTROL_CHARS.search(value):
            place = f" {path}" if path else ""
            raise ImportRefused(f"{where}:{place} contains a control character (U+{ord(found.group()):04X})")
    elif isinstance(value, dict):
        for key, item in value.items():
            _no_controls(where, key, path)
            _no_controls(where, item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _no_controls(where, item, f"{path}[{index}]")


def read_archive(source: str | Path | IO[bytes]) -> Archive:
    """Open, bound, hash-check and parse an archive; ImportRefused says what is wrong.

    Names, kinds and declared sizes are checked from the zip's directory first; then the
    manifest is read, then each member, one at a time, hash-checked and parsed."""
    try:
        zf = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ImportRefused(f"not a readable zip archive ({exc})") from None
    with zf:
        members, folder = _directory(zf)
        if MANIFEST not in members:
            raise ImportRefused("no manifest.json: this is not an export of this service")
        try:
            raw = _read_member(zf, members[MANIFEST][0], MAX_MANIFEST_BYTES)
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ImportRefused("manifest.json is not valid JSON") from None
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
            raise ImportRefused(f"manifest.json cannot be read ({exc})") from None
        manifest = _json("manifest.json", text)
        user_id, listed = _check_manifest(manifest)
        if folder is not None and folder != normalize_id(user_id, what="user_id"):
            raise ImportRefused(f"users/{folder}/: outside this user's folder users/{normalize_id(user_id)}/")
        unlisted = sorted(set(members) - set(listed) - {MANIFEST})
        if unlisted:
            raise ImportRefused(f"files not listed in the manifest: {', '.join(unlisted[:5])}")
        missing = sorted(set(listed) - set(members))
        if missing:
            raise ImportRefused(f"{missing[0]} is listed in the manifest but missing from the archive")
        archive = Archive(user_id=user_id, manifest=manifest)
        history: dict[str, str] = {}
        # Profile and cards first: the history rows are checked against them.
        order = {"profile": 0, "card": 1, "project_card": 1, "history": 2}
        for name in sorted(listed, key=lambda n: (order.get(members[n][1], 3), n)):
            info, kind = members[name]
            try:
                data = _read_member(zf, info, MAX_MEMBER_BYTES)
            except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
                raise ImportRefused(f"{name} cannot be read ({exc})") from None
            entry = listed[name]
            if len(data) != entry["bytes"] or sha256_of(data) != entry["sha256"]:
                raise ImportRefused(f"{name}: its SHA-256 does not match the manifest (changed or damaged)")
            if kind == "history":
                history[name] = _text(name, data)
            elif kind in ("profile", "card", "project_card"):
                _parse_member(archive, name, kind, data)
    return _finish(archive, history)


def _check_manifest(manifest: Any) -> tuple[str, dict[str, dict[str, Any]]]:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ImportRefused("manifest.json does not describe an export of this service")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise ImportRefused(f"format version {version!r} is not supported (this version reads {FORMAT_VERSION})")
    user_id = manifest.get("user_id")
    try:
        clean_id("user_id", user_id, required=True)
    except TurnRejected as exc:
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
    return cast(str, user_id), files


_PATHS = Store(Path("/nonexistent-root"))  # only for the paths a card belongs at


def _parse_member(archive: Archive, name: str, kind: str, data: bytes) -> None:
    """One card or the profile: parsed, every string checked, placed where it says."""
    user_id = archive.user_id
    if problem := too_large(len(data), what="profile" if kind == "profile" else "card"):
        raise ImportRefused(f"{name}: {problem}")
    text = _text(name, data)
    if kind == "profile":
        document = _json(name, text)
        _no_controls(name, document)
        try:
            archive.profile = parse_profile(text, Path(name))
        except CardParseError as exc:
            raise ImportRefused(f"{name}: {exc.message}") from None
        if archive.profile.user_id != user_id:
            raise ImportRefused(f"{name}: the profile belongs to another user")
        archive.profile_bytes = data
        return
    try:
        card = parse_card(text, Path(name))
    except RecursionError:
        raise ImportRefused(f"{name}: front matter nested deeper than {MAX_JSON_DEPTH} levels") from None
    except CardParseError as exc:
        raise ImportRefused(f"{name}: {exc.message}") from None
    _no_controls(name, card.model_dump(mode="json"))
    if kind == "card" and card.user_id != user_id:
        raise ImportRefused(f"{name}: the card belongs to another user")
    if kind == "project_card":
        if not card.is_project:
            raise ImportRefused(f"{name}: a user's card in a project folder")
        try:
            clean_id("project_id", card.project_id, required=True)
            tenancy.check(user_id, card.project_id)
        except TurnRejected as exc:
            raise ImportRefused(f"{name}: {exc}") from None
    try:
        expected = _PATHS.relative(_PATHS.card_path(card))
    except InvalidId as exc:
        raise ImportRefused(f"{name}: {exc}") from None
    if expected != name:
        raise ImportRefused(f"{name}: the card says it belongs at {expected}")
    (archive.cards if kind == "card" else archive.project_cards).append((name, card, data))


def _finish(archive: Archive, history: dict[str, str]) -> Archive:
    ids = [card.id for _, card, _ in archive.cards + archive.project_cards]
    if len(set(ids)) != len(ids):
        raise ImportRefused("the same fact id appears twice in the archive")
    archive.rows = _parse_history(archive, history)
    run_projects = {str(row.pk): row.project_id for row in archive.rows.get("runs", [])}  # type: ignore[attr-defined]
    for name, card, _ in archive.project_cards:
        run_id = card.source.run_id
        if run_id not in run_projects:
            raise ImportRefused(f"{name}: a project card whose source is not one of this user's runs")
        if run_projects[run_id] != card.project_id:
            raise ImportRefused(
                f"{name}: its source run {run_id} was not about the project {card.project_id!r}: a card only "
                "joins a project this user's conversations were about"
            )
    return archive


def _text(name: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ImportRefused(f"{name}: not UTF-8 text") from None


# The fields of history rows that hold ids: checked as the doors check them.
_ID_FIELDS = ("user_id", "thread_id", "project_id")


def _check_row(kind: Kind, obj: models.Model, row: dict[str, Any], where: str) -> None:
    """A history row as a door would have stored it: ids, agent name, characters,
    the project's tenant, and the messages of a turn through `clean_turn`."""
    _no_controls(where, row)
    try:
        for name in _ID_FIELDS:
            value = getattr(obj, name, None)
            if value:
                clean_id(name, value, required=False)
        agent = getattr(obj, "agent_name", None)
        if agent is not None and agent != "" and clean_agent(agent) != agent:
            raise TurnRejected("agent_name", f"{agent!r} is not an agent name as the doors store it")
        project_id = getattr(obj, "project_id", "")
        if project_id:
            tenancy.check(obj.user_id, project_id)  # type: ignore[attr-defined]
        if isinstance(obj, Turn):
            clean_turn(
                user_id=obj.user_id,
                agent_name=obj.agent_name,
                thread_id=obj.thread_id,
                project_id=obj.project_id or None,
                messages=obj.messages,
            )
    except TurnRejected as exc:
        raise ImportRefused(f"{where}: {exc}") from None


def _parse_history(archive: Archive, history: dict[str, str]) -> dict[str, list[models.Model]]:
    people = dict(get_user_model()._default_manager.values_list(get_user_model().USERNAME_FIELD, "pk"))
    fact_ids = {card.id for _, card, _ in archive.cards + archive.project_cards}
    out: dict[str, list[models.Model]] = {}
    for kind in history_kinds():
        if not kind.restore:
            continue
        text = history.get(kind.file, "")
        objs: list[models.Model] = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{kind.file} line {number}"
            row = _json(where, line)
            if not isinstance(row, dict):
                raise ImportRefused(f"{where}: not a JSON object")
            obj = _build(kind, row, where, people)
            owner = getattr(obj, "user_id", None) if kind.model not in (FactRevision, FactUsage) else None
            if owner is not None and owner != archive.user_id:
                raise ImportRefused(f"{where}: a row of another user")
            if kind.model in (FactRevision, FactUsage) and obj.fact_id not in fact_ids:  # type: ignore[attr-defined]
                raise ImportRefused(f"{where}: names a fact that is not in the archive")
            _check_row(kind, obj, row, where)
            if isinstance(obj, Turn) and obj.status in (Turn.Status.PENDING, Turn.Status.PROCESSING):
                # Waiting (or claimed by a worker of the old deployment): it comes back
                # pending, unclaimed, and its thread is queued for this worker.
                obj.status, obj.claimed_by, obj.lease_until = Turn.Status.PENDING, "", None
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
