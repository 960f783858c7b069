"""The errors of the file store and the write path, in one place.

Callers catch `StoreError` (or one of its kinds) without importing the machinery that
raises it: ids refuse a name (`InvalidId`), a file cannot be read (`CardParseError`), a
lock is not granted in time (`LockTimeout`), a write would lose an update
(`RevisionConflict`).
"""

from __future__ import annotations

from pathlib import Path


class StoreError(Exception):
    """Base class of the store's errors."""


class InvalidId(StoreError, ValueError):
    """A user, project, agent or fact id that cannot name a place on disk."""


class CardParseError(StoreError):
    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class CardTooLarge(CardParseError):
    """A card over ``MEMORY_MAX_CARD_BYTES`` (a profile over 16 times that): refused
    before anything is written."""


class RevisionConflict(StoreError):
    """The file changed since the caller read it (a lost update was prevented)."""


class LockTimeout(StoreError):
    pass
