"""Rebuilding the DB mirror from the files, and finding drift between the two."""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import multiprocessing
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import transaction

from facts.models import FactCard, FactRevision, ProfileSection
from facts.storage import hooks
from facts.storage.cardfile import Card, dump_card, file_digest, parse_card, parse_card_fast
from facts.storage.errors import CardParseError, InvalidId, RevisionConflict
from facts.storage.fileread import ReadRefused, read_bounded
from facts.storage.ids import normalize_agent, normalize_id, shard
from facts.storage.profilefile import Profile, parse_profile
from facts.storage.store import Store
from facts.storage.writer import Put, commit, mirror_profile, mirror_row, upsert_mirror

Progress = Callable[[int, int], None]


class Scanned:
    """One card file as a scan read it: its path, the SHA-256 of its text, and the card
    (or why there is none), with what the registered scan extras computed from it.

    A scanning process parses the card (unless the scan cache knows its file), runs the
    extras, and sends the card back as its file's bytes: pickling a pydantic card and
    unpickling it in the serial parent cost ~80 µs a card, bytes next to nothing. `card`
    parses them again on first use (the file parsed once already, so it cannot fail),
    which a rebuild needs only for the few cards whose file changed; `ident` (id, user,
    agent, project) is sent along for the checks every card gets.
    """

    __slots__ = ("_card", "_raw", "cached", "digest", "error", "extra", "ident", "rel")

    def __init__(
        self,
        rel: str,
        digest: str = "",
        card: Card | None = None,
        error: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.rel = rel
        self.digest = digest
        self.error = error
        # Results of the registered scan extras, computed in the scanning processes.
        self.extra: dict[str, Any] = extra if extra is not None else {}
        self._card = card
        self._raw: bytes | None = None
        self.ident: tuple[str, str | None, str | None, str | None] | None = (
            None if card is None else (card.id, card.user_id, card.agent_name, card.project_id)
        )
        # True when the scan took `ident` and `extra` from the scan cache (`set_scan_cache`)
        # instead of parsing the text.
        self.cached = False

    @classmethod
    def from_cache(cls, rel: str, digest: str, raw: bytes, ident: tuple, extra: dict[str, Any]) -> Scanned:
        item = cls(rel, digest, extra=extra)
        item.ident, item._raw, item.cached = ident, raw, True
        return item

    @property
    def card(self) -> Card | None:
        if self._card is None and self._raw is not None:
            # As the scan parsed it: the fast reader, else the full one (~50 against
            # ~70 µs; a first index parses every card again here for the mirror).
            text = self._raw.decode("utf-8")
            self._card = parse_card_fast(text) or parse_card(text, Path(self.rel))
            self._raw = None
        return self._card

    @property
    def fact_id(self) -> str | None:
        return None if self.ident is None else self.ident[0]

    def keep_bytes(self, raw: bytes) -> Scanned:
        """Drop the parsed card, keeping the file's bytes to parse it again (before
        pickling). Bytes, not the text: UTF-8 is half the size of Python's str for a
        card with any Chinese in it (one CJK character widens the whole string)."""
        if self._card is not None:
            self._card, self._raw = None, raw
        return self

    def __getstate__(self) -> tuple:
        return (self.rel, self.digest, self.error, self.extra, self.ident, self._card, self._raw, self.cached)

    def __setstate__(self, state: tuple) -> None:
        self.rel, self.digest, self.error, self.extra, self.ident, self._card, self._raw, self.cached = state

    def __repr__(self) -> str:
        return f"Scanned({self.rel!r}, {self.digest[:12]!r}, id={self.fact_id!r}, error={self.error!r})"


@dataclass
class _ScanExtra:
    fn: Callable[[Card], Any]
    prepare: Callable[[], None] | None


# Per-card work that rides along with the parallel scan (the read side registers its
# tokenizer here, so a rebuild tokenizes on every core). Inherited by the forked workers.
_scan_extras: dict[str, _ScanExtra] = {}


def add_scan_extra(name: str, fn: Callable[[Card], Any], *, prepare: Callable[[], None] | None = None) -> None:
    """Run `fn(card)` on every card parsed by `snapshot`; the result is `Scanned.extra[name]`.
    `prepare` runs once in the parent before any worker is forked (load dictionaries)."""
    _scan_extras[name] = _ScanExtra(fn, prepare)


# What a card file's text gave last time, by its SHA-256: the read side keeps it beside
# its index (`retrieval.scancache.lookup`). Given the digests of a chunk of files,
# it returns digest → (ident, extra) for those it knows, so the scan skips parsing them
# and running the extras (~130 µs of a ~160 µs scan per card). It returns nothing when
# the cache is bypassed or being verified: then every card is parsed.
_scan_cache: Callable[[list[str]], dict[str, tuple[tuple, dict[str, Any]]]] | None = None


def set_scan_cache(lookup: Callable[[list[str]], dict[str, tuple[tuple, dict[str, Any]]]] | None) -> None:
    global _scan_cache
    _scan_cache = lookup


@dataclass
class ScannedProfile:
    rel: str
    digest: str = ""
    profile: Profile | None = None
    error: str | None = None


def _scan_one(args: tuple[str, str]) -> Scanned:
    root, rel = args
    read = _read(root, rel)
    return read if isinstance(read, Scanned) else _parse(root, rel, *read)[0]


def _read(root: str, rel: str) -> Scanned | tuple[bytes, str]:
    """(bytes, digest) of a card file, or the Scanned saying why it cannot be read. The
    digest is `file_digest` of the text: valid UTF-8 encodes back to the same bytes (and
    a file the scan cache knows was valid UTF-8 when it was parsed)."""
    # Plain strings: two Path objects per card cost ~15 µs of a ~180 µs scan.
    try:
        raw = read_bounded(os.path.join(root, rel))
    except FileNotFoundError:
        return Scanned(rel, error="file disappeared during the scan")
    except ReadRefused as exc:  # a FIFO, a card too large, a mount that does not answer
        return Scanned(rel, error=exc.message)
    except OSError as exc:
        return Scanned(rel, error=f"cannot be read ({exc.strerror or exc})")
    return raw, hashlib.sha256(raw).hexdigest()


def _parse(root: str, rel: str, raw: bytes, digest: str) -> tuple[Scanned, bool]:
    """The Scanned of a card file's bytes; True when it holds a parsed card."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Scanned(rel, error="file is not valid UTF-8"), False
    try:
        card = parse_card_fast(text) or parse_card(text, Path(os.path.join(root, rel)))
    except CardParseError as exc:
        return Scanned(rel, digest, error=exc.message), False
    return Scanned(rel, digest, card, extra={name: extra.fn(card) for name, extra in _scan_extras.items()}), True


def _scan_chunk(args: tuple[str, list[str]]) -> list[Scanned]:
    """In a scanning process: the chunk's cards, each sent back as its file's bytes
    (see `Scanned`); those the scan cache knows by their digest are not parsed at all."""
    root, rels = args
    read = [(rel, _read(root, rel)) for rel in rels]
    known = _scan_cache([r[1] for _, r in read if not isinstance(r, Scanned)]) if _scan_cache else {}
    out = []
    for rel, got in read:
        if isinstance(got, Scanned):
            out.append(got)
            continue
        raw, digest = got
        hit = known.get(digest)
        if hit is not None and hit[1].keys() >= _scan_extras.keys():
            out.append(Scanned.from_cache(rel, digest, raw, *hit))
            continue
        item, parsed = _parse(root, rel, raw, digest)
        out.append(item.keep_bytes(raw) if parsed else item)
    return out


def _walk(root: str, rel_dir: str, found: list, *, ctimes: bool = False) -> list:
    """Card files under one folder, in the order of `Store.card_files` (relative paths,
    or (path, ctime_ns) pairs with `ctimes`). One `scandir` per folder: `os.walk` plus a
    stat per file cost ~1.9 s of CPU at 100k cards, this ~1.1 s with the stat."""
    try:
        with os.scandir(os.path.join(root, rel_dir)) as listing:
            entries = sorted(listing, key=lambda e: e.name)
    except OSError:  # gone meanwhile, or unreadable: skipped, as `os.walk` does
        return found
    subdirs = []
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        if is_dir:
            # As `os.walk` (no followlinks): a linked folder is listed, not entered.
            if not entry.is_symlink():
                subdirs.append(entry.name)
        elif entry.name.endswith(".md"):
            rel = f"{rel_dir}/{entry.name}"
            if ctimes:
                try:
                    found.append((rel, entry.stat().st_ctime_ns))
                except OSError:
                    found.append((rel, None))
            else:
                found.append(rel)
    for name in subdirs:
        _walk(root, f"{rel_dir}/{name}", found, ctimes=ctimes)
    return found


def _walk_many(args: tuple[str, list[str], bool]) -> list:
    """`_walk` over several folders (in a pool worker): paths, or (path, ctime) pairs."""
    root, rel_dirs, ctimes = args
    found: list = []
    for rel_dir in rel_dirs:
        _walk(root, rel_dir, found, ctimes=ctimes)
    return found


def _card_ctimes(store: Store) -> list[tuple[str, int | None]]:
    """(relative path, ctime_ns) of `Store.card_files`, in its order; on two processes
    when there are many folders (the commit gate is held while this runs)."""
    root = str(store.root)
    tops = [_top_dirs_of(store, top) for top in ("users", "projects")]
    many = (os.cpu_count() or 1) > 1 and sum(len(dirs) for _, dirs in tops) >= _PARALLEL_WALK_DIRS
    found: list[tuple[str, int | None]] = []
    pool = multiprocessing.get_context("fork").Pool(2) if many else None
    try:
        for files, dirs in tops:
            for rel in files:
                try:
                    found.append((rel, os.stat(os.path.join(root, rel)).st_ctime_ns))
                except OSError:
                    found.append((rel, None))
            chunks = [(root, dirs[i : i + 25], True) for i in range(0, len(dirs), 25)]
            for part in pool.imap(_walk_many, chunks) if pool else map(_walk_many, chunks):
                found.extend(part)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    return found


def _card_rels(store: Store, pool: Any | None = None) -> list[str]:
    """The relative paths of `Store.card_files`, in its order; the folders are walked
    on the pool when one is given."""
    root = str(store.root)
    rels: list[str] = []
    for top in ("users", "projects"):
        files, dirs = _top_dirs_of(store, top)
        rels.extend(files)
        if pool is None:
            rels.extend(_walk_many((root, dirs, False)))
        else:
            for part in pool.imap(_walk_many, [(root, dirs[i : i + 25], False) for i in range(0, len(dirs), 25)]):
                rels.extend(part)
    return rels


def _top_dirs_of(store: Store, top: str) -> tuple[list[str], list[str]]:
    base = store.root / top
    if not base.is_dir():
        return [], []
    with os.scandir(base) as entries:
        items = sorted(entries, key=lambda e: e.name)
    files = [f"{top}/{e.name}" for e in items if e.is_file() and e.name.endswith(".md") and not e.name.startswith(".")]
    dirs = [f"{top}/{e.name}" for e in items if e.is_dir() and not e.name.startswith(".")]
    return files, dirs


# Below this many user/project folders the walk is not worth a process pool.
_PARALLEL_WALK_DIRS = 64
_PARALLEL_PARSE_CARDS = 2000


def scan_cards(store: Store, *, workers: int | None = None, progress: Progress | None = None) -> Iterator[Scanned]:
    """Read and parse every card file, on several processes when there are many."""
    workers = workers or min(os.cpu_count() or 1, 4)
    root = str(store.root)
    rels: list[str] | None = None
    if workers < 2 or sum(len(_top_dirs_of(store, top)[1]) for top in ("users", "projects")) < _PARALLEL_WALK_DIRS:
        rels = _card_rels(store)
        if workers < 2 or len(rels) < _PARALLEL_PARSE_CARDS:
            yield from _scan_serial(root, rels, progress)
            return
    for extra in _scan_extras.values():
        if extra.prepare:
            extra.prepare()
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        if rels is None:
            rels = _card_rels(store, pool)
        total = len(rels)
        size = 500
        chunks = [(root, rels[i : i + size]) for i in range(0, total, size)]
        done = 0
        for batch in pool.imap(_scan_chunk, chunks):
            yield from batch
            done += len(batch)
            if progress:
                progress(done, total)
        if progress and total == 0:
            progress(0, 0)


def _scan_serial(root: str, rels: list[str], progress: Progress | None) -> Iterator[Scanned]:
    # The same chunks as the scanning processes read (the scan cache works the same).
    total = len(rels)
    for start in range(0, total, 500):
        yield from _scan_chunk((root, rels[start : start + 500]))
        if progress:
            progress(min(start + 500, total), total)
    if progress and total == 0:
        progress(0, 0)


def scan_profiles(store: Store) -> Iterator[ScannedProfile]:
    for path in store.profile_files():
        rel = store.relative(path)
        try:
            text = read_bounded(path, what="profile").decode("utf-8")
        except UnicodeDecodeError:
            yield ScannedProfile(rel, error="file is not valid UTF-8")
            continue
        except ReadRefused as exc:
            yield ScannedProfile(rel, error=exc.message)
            continue
        digest = file_digest(text)
        try:
            yield ScannedProfile(rel, digest, parse_profile(text, path))
        except CardParseError as exc:
            yield ScannedProfile(rel, digest, error=exc.message)


@dataclass
class Drift:
    """Differences between the files and a derived copy (the mirror or the index)."""

    missing: list[str] = field(default_factory=list)  # in the files, not in the copy
    extra: list[str] = field(default_factory=list)  # in the copy, no file
    changed: list[str] = field(default_factory=list)  # both, but different
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (path, problem)

    @property
    def clean(self) -> bool:
        return not (self.missing or self.extra or self.changed)

    def as_dict(self) -> dict[str, object]:
        return {
            "missing": self.missing,
            "extra": self.extra,
            "changed": self.changed,
            "unreadable": [{"path": p, "error": e} for p, e in self.unreadable],
        }


@dataclass
class FileSnapshot:
    cards: dict[str, Scanned] = field(default_factory=dict)
    profiles: dict[str, ScannedProfile] = field(default_factory=dict)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    # The file system's clock when the scan began (0: unknown); see `refresh`.
    started_ns: int = 0


# A file whose status changed this long before the scan began was read as it is now.
# The margin covers the kernel's coarse timestamps and small clock adjustments.
_CTIME_MARGIN_NS = 2_000_000_000


def _fs_now_ns(root: Path) -> int:
    """The time as the file system under `root` stamps it (an NFS server's clock may
    differ from ours), read from a file created for the purpose; 0 when it cannot be."""
    try:
        fd, name = tempfile.mkstemp(prefix=".scan-clock-", dir=root)
    except OSError:
        return 0
    try:
        return os.fstat(fd).st_ctime_ns
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name)


@functools.lru_cache(maxsize=4096)
def _bucket_rel(user_id: str | None, agent_name: str | None, project_id: str | None) -> str | None:
    try:
        if user_id is not None:
            return f"users/{normalize_id(user_id, what='user_id')}/agents/{normalize_agent(agent_name)}/facts"
        if project_id:
            return f"projects/{normalize_id(project_id, what='project_id')}/facts"
    except InvalidId:
        return None
    return None


def _rel_for(fact_id: str, user_id: str | None, agent_name: str | None, project_id: str | None) -> str | None:
    """`store.relative(store.card_path(card))` without pathlib (a rebuild checks 100k of
    them); None when the card names no valid bucket."""
    base = _bucket_rel(user_id, agent_name, project_id)
    return None if base is None else f"{base}/{shard(fact_id)}/{fact_id}.md"


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a rebuild makes its ~1M objects.

    Its generational passes walked everything the scan had already built, again and
    again: ~1.5 s of CPU at 100k cards, about a third of a warm scan. What a rebuild
    makes is acyclic (strings, tuples, dicts of them), so reference counting frees it
    all the same; the collector is on again afterwards (unless it was off before).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def snapshot(store: Store, *, progress: Progress | None = None, workers: int | None = None) -> FileSnapshot:
    with gc_paused():
        return _snapshot(store, progress=progress, workers=workers)


def _snapshot(store: Store, *, progress: Progress | None, workers: int | None) -> FileSnapshot:
    snap = FileSnapshot(started_ns=_fs_now_ns(store.root))
    _classify(store, scan_cards(store, progress=progress, workers=workers), snap)
    for item in scan_profiles(store):
        if item.profile is None:
            snap.unreadable.append((item.rel, item.error or "unreadable"))
        else:
            snap.profiles[item.profile.user_id] = item
    return snap


def mirror_drift(snap: FileSnapshot) -> Drift:
    drift = Drift(unreadable=list(snap.unreadable))
    mirrored = dict(FactCard.objects.values_list("id", "file_sha256"))
    for fact_id, item in snap.cards.items():
        if fact_id not in mirrored:
            drift.missing.append(fact_id)
        elif mirrored[fact_id] != item.digest:
            drift.changed.append(fact_id)
    drift.extra.extend(sorted(set(mirrored) - set(snap.cards)))
    profiles = dict(ProfileSection.objects.values_list("user_id", "file_sha256").distinct())
    for user_id, scanned in snap.profiles.items():
        if user_id not in profiles:
            drift.missing.append(f"profile:{user_id}")
        elif profiles[user_id] != scanned.digest:
            drift.changed.append(f"profile:{user_id}")
    drift.extra.extend(f"profile:{u}" for u in sorted(set(profiles) - set(snap.profiles)))
    drift.missing.sort()
    drift.changed.sort()
    return drift


@dataclass
class RebuildStats:
    cards: int = 0
    profiles: int = 0
    changed: int = 0
    removed: int = 0
    unreadable: list[tuple[str, str]] = field(default_factory=list)


def rebuild_mirror(snap: FileSnapshot, *, actor: str = "reindex", full: bool = False) -> RebuildStats:
    """Make the mirror equal to the files. Hand edits get a revision in the history.

    A row whose recorded file hash equals the file's is left alone: every column is
    derived from that text (and its path, which the text determines), and rewriting
    100k unchanged rows was ~40 % of a `reindex`. `full` rewrites every row anyway
    (``reindex --no-cache``: the mirror was touched by something other than the writer).
    """
    stats = RebuildStats(unreadable=list(snap.unreadable))
    mirrored = dict(FactCard.objects.values_list("id", "file_sha256"))
    revisions = []
    for fact_id, item in snap.cards.items():
        if mirrored.get(fact_id) != item.digest:
            stats.changed += 1
            revisions.append((item, item.rel))
    items = list(snap.cards.values()) if full else [item for item, _ in revisions]
    with transaction.atomic():
        # A chunk of model instances at a time: 100k at once cost ~100 MB of peak RSS.
        for start in range(0, len(items), 2000):
            upsert_mirror([mirror_row(i.card, i.rel, i.digest) for i in items[start : start + 2000] if i.card])
        gone = set(mirrored) - set(snap.cards)
        if gone:
            FactCard.objects.filter(id__in=gone).delete()
        stats.removed = len(gone)
        ProfileSection.objects.exclude(user_id__in=list(snap.profiles)).delete()
        for scanned in snap.profiles.values():
            assert scanned.profile is not None
            mirror_profile(scanned.profile, scanned.rel, scanned.digest)
    _record_hand_edits(revisions, actor)
    stats.cards = len(snap.cards)
    stats.profiles = len(snap.profiles)
    return stats


def _record_hand_edits(changed: list[tuple[Scanned, str]], actor: str) -> None:
    """Give every card that changed on disk a place in its history.

    A card the history has never seen (placed by hand, restored from a backup) gets its
    revision recorded as it is. A card whose file no longer matches the recorded text of
    its revision was edited by hand: it is committed again through the write function so
    it gets a new revision — otherwise a dashboard edit holding the old revision number
    would pass the revision check and silently overwrite the hand edit.
    """
    if not changed:
        return
    ids = [item.fact_id for item, _ in changed if item.fact_id is not None]
    recorded = {
        (fact_id, revision): file_digest(text)
        for fact_id, revision, text in FactRevision.objects.filter(fact_id__in=ids).values_list(
            "fact_id", "revision", "text"
        )
    }
    new: list[FactRevision] = []
    edited: list[Card] = []
    for item, _ in changed:
        card = item.card
        assert card is not None
        digest = recorded.get((card.id, card.revision))
        if digest is None:
            new.append(
                FactRevision(
                    fact_id=card.id, revision=card.revision, text=dump_card(card), actor=actor, reason="found on disk"
                )
            )
        elif digest != item.digest and digest != file_digest(dump_card(card)):
            edited.append(card)
    FactRevision.objects.bulk_create(new, ignore_conflicts=True, batch_size=500)
    for card in edited:
        # Written again since the scan? That commit read the hand edit and has its revision.
        with contextlib.suppress(RevisionConflict):
            commit([Put(card, expected_revision=card.revision)], actor=actor, reason="edited on disk")


# --- catching up with the writes made during a rebuild ----------------------------------


def _classify(store: Store, items: Iterator[Scanned] | list[Scanned], snap: FileSnapshot) -> None:
    for item in items:
        if item.ident is None:
            snap.unreadable.append((item.rel, item.error or "unreadable"))
            continue
        fact_id = item.ident[0]
        if fact_id in snap.cards:
            snap.unreadable.append((item.rel, f"duplicate id {fact_id} (also in {snap.cards[fact_id].rel})"))
        elif _rel_for(*item.ident) != item.rel:
            snap.unreadable.append((item.rel, "card is not in the folder its user/agent/project and id say"))
        else:
            snap.cards[fact_id] = item


def refresh(store: Store, snap: FileSnapshot) -> tuple[list[Card], list[Card]]:
    """Bring `snap` up to date with the files; returns (cards whose file changed or
    appeared since the snapshot, cards whose file is gone).

    Every file is listed again; one is read again only when its status changed since
    shortly before the scan began (its ctime, which no program can set back, by the file
    system's own clock: every write replaces or rewrites the file), and parsed again only
    when its text changed. Reading all 100k files again cost ~8 s with commits held off.
    Meant to run with ``store.commit_gate(exclusive=True)`` held, so that no commit is
    half-way while it reads.
    """
    root = str(store.root)
    known = {item.rel: item for item in snap.cards.values()}
    items: list[Scanned] = []
    settled = snap.started_ns - _CTIME_MARGIN_NS if snap.started_ns else 0
    for rel, ctime in _card_ctimes(store):
        old = known.get(rel)
        if old is not None:
            if settled and ctime is not None and ctime < settled:
                items.append(old)
                continue
            try:
                text = read_bounded(store.root / rel).decode("utf-8")
            except (OSError, UnicodeDecodeError):  # gone, refused: scanned again, which says why
                text = None
            if text is not None and file_digest(text) == old.digest:
                items.append(old)
                continue
        items.append(_scan_one((root, rel)))
    fresh = FileSnapshot(started_ns=snap.started_ns)
    _classify(store, items, fresh)
    for item in scan_profiles(store):
        if item.profile is None:
            fresh.unreadable.append((item.rel, item.error or "unreadable"))
        else:
            fresh.profiles[item.profile.user_id] = item
    # Cards in `snap.cards` all parsed; `.card` is read only for those that changed (a
    # scanned card is parsed again on first use).
    changed = [
        item.card
        for fact_id, item in fresh.cards.items()
        if (fact_id not in snap.cards or snap.cards[fact_id].digest != item.digest) and item.card is not None
    ]
    gone = [item.card for fact_id, item in snap.cards.items() if fact_id not in fresh.cards and item.card is not None]
    snap.cards, snap.profiles, snap.unreadable = fresh.cards, fresh.profiles, fresh.unreadable
    return changed, gone


def catch_up(store: Store, snap: FileSnapshot) -> int:
    """The last step of a rebuild: apply what was committed while it ran.

    A rebuild reads the files, then replaces mirror and index from what it read; a
    commit that lands in between would be undone (an older version put back, a new
    card dropped) until the next rebuild. With every commit shut out for a moment, the
    files are read again and whatever changed since the snapshot goes to the mirror
    and, through the write hook, to the index. Returns how many cards it applied.
    """
    with store.commit_gate(exclusive=True):
        changed, gone = refresh(store, snap)
        mirrored_profiles = dict(ProfileSection.objects.values_list("user_id", "file_sha256").distinct())
        stale_profiles = [
            item for user_id, item in snap.profiles.items() if mirrored_profiles.get(user_id) != item.digest
        ]
        vanished_profiles = set(mirrored_profiles) - set(snap.profiles)
        if changed or gone or stale_profiles or vanished_profiles:
            with transaction.atomic():
                upsert_mirror(
                    [mirror_row(card, snap.cards[card.id].rel, snap.cards[card.id].digest) for card in changed]
                )
                if gone:
                    FactCard.objects.filter(id__in=[card.id for card in gone]).delete()
                for item in stale_profiles:
                    assert item.profile is not None
                    mirror_profile(item.profile, item.rel, item.digest)
                if vanished_profiles:
                    ProfileSection.objects.filter(user_id__in=vanished_profiles).delete()
        if changed or gone:
            hooks.cards_changed(changed, gone)
    return len(changed) + len(gone)
