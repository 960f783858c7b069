"""The Store: where memory files live under MEMORY_ROOT, and reading and writing them.

Layout (docs/design.md §4)::

    {root}/users/{user}/memory.json
    {root}/users/{user}/agents/{agent}/facts/{xx}/{fact_id}.md
    {root}/projects/{project}/facts/{xx}/{fact_id}.md
    {root}/.retrieval/            derived index, owned by the retrieval app
    {root}/.locks/                per-user and per-project lock files

A `Bucket` names a user × agent or a project; the `Store` maps buckets and ids to
paths, takes their locks (`facts.storage.locks`), and reads and writes single files in their
formats (`facts.storage.cardfile`, `facts.storage.profilefile`) atomically (`facts.storage.atomic`). Nothing
here touches the database; `facts.storage.writer` composes store + mirror + index.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from facts.storage import locks
from facts.storage.atomic import atomic_write, remove_file
from facts.storage.cardfile import Card, dump_card, parse_card
from facts.storage.errors import CardParseError, InvalidId
from facts.storage.fileread import ReadRefused, read_bounded
from facts.storage.ids import check_fact_id, normalize_agent, normalize_id, shard
from facts.storage.profilefile import Profile, dump_profile, parse_profile


@dataclass(frozen=True)
class Bucket:
    """Where a card lives: a user × agent bucket or a project bucket."""

    user_id: str | None = None
    agent_name: str | None = None
    project_id: str | None = None

    @classmethod
    def of(cls, card: Card) -> Bucket:
        if card.user_id is None:
            return cls(project_id=card.project_id)
        return cls(user_id=card.user_id, agent_name=normalize_agent(card.agent_name))

    @property
    def lock_name(self) -> str:
        if self.user_id is not None:
            return "users/" + normalize_id(self.user_id, what="user_id")
        return "projects/" + normalize_id(self.project_id or "", what="project_id")


class Store:
    def __init__(self, root: Path | str, lock_timeout: float = 30.0) -> None:
        self.root = Path(root)
        self.lock_timeout = lock_timeout

    # paths
    def user_dir(self, user_id: str) -> Path:
        return self.root / "users" / normalize_id(user_id, what="user_id")

    def profile_path(self, user_id: str) -> Path:
        return self.user_dir(user_id) / "memory.json"

    def facts_dir(self, bucket: Bucket) -> Path:
        if bucket.user_id is not None:
            return self.user_dir(bucket.user_id) / "agents" / normalize_agent(bucket.agent_name) / "facts"
        if not bucket.project_id:
            raise InvalidId("a card needs a user_id or a project_id")
        return self.root / "projects" / normalize_id(bucket.project_id, what="project_id") / "facts"

    def card_path(self, card: Card) -> Path:
        return self.path_for(Bucket.of(card), card.id)

    def path_for(self, bucket: Bucket, fact_id: str) -> Path:
        check_fact_id(fact_id)
        return self.facts_dir(bucket) / shard(fact_id) / f"{fact_id}.md"

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    # locking
    def lock(self, *buckets: Bucket) -> AbstractContextManager[None]:
        """Cross-process locks of the given users/projects, taken in a fixed order."""
        return locks.hold(self.root, [bucket.lock_name for bucket in buckets], self.lock_timeout)

    def commit_gate(self, *, exclusive: bool = False) -> AbstractContextManager[None]:
        """The gate commits hold shared and a rebuild's catch-up exclusively (`facts.storage.locks.commit_gate`)."""
        return locks.commit_gate(self.root, self.lock_timeout, exclusive=exclusive)

    # cards
    def read_card_at(self, path: Path) -> Card:
        try:
            text = read_bounded(path).decode("utf-8")
        except UnicodeDecodeError:
            raise CardParseError(path, "file is not valid UTF-8") from None
        except ReadRefused as exc:
            raise CardParseError(path, exc.message) from None
        return parse_card(text, path)

    def read_card(self, bucket: Bucket, fact_id: str) -> Card | None:
        path = self.path_for(bucket, fact_id)
        if not path.exists():
            return None
        return self.read_card_at(path)

    def write_card(self, card: Card) -> Path:
        path = self.card_path(card)
        atomic_write(path, dump_card(card))
        return path

    def delete_card(self, card: Card) -> bool:
        return remove_file(self.card_path(card))

    def card_files(self) -> Iterator[Path]:
        """Every card file under the root, in a stable order (temp files skipped)."""
        for top in ("users", "projects"):
            base = self.root / top
            if not base.is_dir():
                continue
            for dirpath, dirnames, filenames in os.walk(base):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                for name in sorted(filenames):
                    if name.endswith(".md") and not name.startswith("."):
                        yield Path(dirpath) / name

    def profile_files(self) -> Iterator[Path]:
        base = self.root / "users"
        if not base.is_dir():
            return
        for entry in sorted(base.iterdir()):
            path = entry / "memory.json"
            if path.is_file():
                yield path

    # profiles
    def read_profile(self, user_id: str) -> Profile:
        path = self.profile_path(user_id)
        if not path.exists():
            return Profile(user_id=user_id)
        return self.read_profile_at(path)

    def read_profile_at(self, path: Path) -> Profile:
        try:
            text = read_bounded(path, what="profile").decode("utf-8")
        except UnicodeDecodeError:
            raise CardParseError(path, "file is not valid UTF-8") from None
        except ReadRefused as exc:
            raise CardParseError(path, exc.message) from None
        return parse_profile(text, path)

    def write_profile(self, profile: Profile) -> Path:
        path = self.profile_path(profile.user_id)
        atomic_write(path, dump_profile(profile))
        return path


def get_store() -> Store:
    return Store(settings.MEMORY_ROOT, lock_timeout=settings.MEMORY_LOCK_TIMEOUT)
