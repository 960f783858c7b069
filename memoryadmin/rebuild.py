"""Rebuilding everything derived from the files: the DB mirror and the search index.

This is composition (both sides), so it lives in the project package. The read side
adds its part through `INDEX_PARTS` below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from facts import mirror
from facts.storage import snapshots
from facts.storage.snapshots import Drift, FileSnapshot
from facts.storage.store import get_store
from retrieval import derived, indexbuild, indexdrift, indexrows

Progress = Callable[[int, int], None]
# Told each step of a rebuild as it starts: "files" (reading them), "mirror", "embedding"
# (the cards whose vector the cache lacks; `progress` counts them), "index", "catch-up".
Phase = Callable[[str], None]


@dataclass
class CheckReport:
    parts: dict[str, Drift] = field(default_factory=dict)
    unreadable: list[tuple[str, str]] = field(default_factory=list)

    @property
    def in_step(self) -> bool:
        """No drift: mirror and index hold exactly what the readable files say."""
        return all(d.clean for d in self.parts.values())

    @property
    def clean(self) -> bool:
        """In step and every memory file readable: an unreadable card is missing from
        context and search as surely as a drifted one, so it is never clean."""
        return self.in_step and not self.unreadable

    def as_dict(self) -> dict[str, Any]:
        return {
            "clean": self.clean,
            "in_step": self.in_step,
            **{name: {k: v for k, v in d.as_dict().items() if k != "unreadable"} for name, d in self.parts.items()},
            "unreadable": [{"path": p, "error": e} for p, e in self.unreadable],
        }


@dataclass
class RebuildResult:
    cards: int = 0
    profiles: int = 0
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cards": self.cards,
            "profiles": self.profiles,
            **self.extra,
            "unreadable": [{"path": p, "error": e} for p, e in self.unreadable],
        }


def _compare(snap: FileSnapshot) -> CheckReport:
    report = CheckReport(unreadable=list(snap.unreadable))
    report.parts["mirror"] = mirror.mirror_drift(snap)
    report.parts["index"] = indexdrift.drift(snap)
    # Sentence vectors (issue 19): only when embeddings are on.
    vector_drift = indexdrift.vector_drift(snap)
    if vector_drift is not None:
        report.parts["vectors"] = vector_drift
    # The cache of derived data (issue 23): entries that disagree with their text.
    report.parts["cache"] = indexdrift.cache_drift(snap)
    return report


def check(*, progress: Progress | None = None, verify: bool = True) -> CheckReport:
    """Files vs mirror, index, vectors and the derived-data cache. `verify`: parse and
    tokenize every card again and compare what the cache holds (``reindex --check``);
    without it the check trusts the cache as a rebuild does (right after a rebuild
    wrote it: tokenizing every card again doubled the dashboard's rebuild)."""
    store = get_store()
    # The scan tokenizes every card afresh and compares the cached terms with the result.
    with derived.mode("verify" if verify else "use"):
        snap = snapshots.snapshot(store, progress=progress)
        report = _compare(snap)
        if not report.in_step:
            # A commit that landed during the scan looks like drift; look again with
            # commits held off for a moment, so only real drift is reported.
            with store.commit_gate(exclusive=True):
                snapshots.refresh(store, snap)
                report = _compare(snap)
    return report


def rebuild(
    *, progress: Progress | None = None, actor: str = "reindex", no_cache: bool = False, phase: Phase | None = None
) -> RebuildResult:
    with snapshots.gc_paused():
        return _rebuild(progress=progress, actor=actor, no_cache=no_cache, phase=phase or (lambda _name: None))


def _rebuild(*, progress: Progress | None, actor: str, no_cache: bool, phase: Phase) -> RebuildResult:
    store = get_store()
    phase("files")
    # `no_cache`: every card is tokenized and embedded again, and the cache rewritten.
    with derived.mode("bypass" if no_cache else "use"):
        snap = snapshots.snapshot(store, progress=progress)
    # Hand edits are committed again below (a revision each): with the scan's terms.
    indexrows.remember_scanned(snap)
    # The vectors the cache lacks (every card's, the first time: minutes of CPU) are
    # embedded on every core while this process writes the mirror.
    ahead = indexbuild.embed_ahead(snap, no_cache=no_cache)
    try:
        phase("mirror")
        # `no_cache` also rewrites every mirror row, not only those whose file changed.
        stats = mirror.rebuild_mirror(snap, actor=actor, full=no_cache)
        if ahead is not None:
            phase("embedding")
            ahead.wait(progress)
    except BaseException:
        if ahead is not None:
            ahead.cancel()
        raise
    result = RebuildResult(cards=stats.cards, profiles=stats.profiles, unreadable=stats.unreadable)
    result.extra["changed"] = stats.changed
    result.extra["removed"] = stats.removed
    if ahead is not None:
        result.extra["embedded"] = ahead.total
    phase("index")
    result.extra.update(indexbuild.rebuild_from_snapshot(snap, progress=None, no_cache=no_cache, ahead=ahead))
    # Commits made while the rebuild ran would otherwise be undone in mirror and index.
    phase("catch-up")
    result.extra["caught_up"] = mirror.catch_up(store, snap)
    return result
