"""Reading every card and profile file under the root, on every core: a rebuild's scan.

Each card file is read, hashed and parsed in scanning processes (`scan_cards`), which
also run what the read side registered (`add_scan_extra`: its index rows, so a
rebuild's tokenizing is spread over every core too) and skip parsing the files a
registered scan cache has seen (`set_scan_cache`: by file digest). What comes back is a
`Scanned` per file; `facts.storage.snapshots` assembles them into a snapshot of the
files, which the mirror (`facts.mirror`) and the index rebuild from.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from facts.storage.cardfile import Card, file_digest, parse_card, parse_card_fast
from facts.storage.errors import CardParseError
from facts.storage.fileread import ReadRefused, read_bounded
from facts.storage.profilefile import Profile, parse_profile
from facts.storage.store import Store

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


def scan_one(args: tuple[str, str]) -> Scanned:
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


def card_ctimes(store: Store) -> list[tuple[str, int | None]]:
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
