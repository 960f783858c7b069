"""The profile file, ``memory.json``: a user's profile and history summaries.

`Profile` holds the sections of docs/design.md §4 (`USER_SECTIONS`, `HISTORY_SECTIONS`),
each a `Section` with its summary, when it changed and where it came from;
`dump_profile` and `parse_profile` are the file format.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from facts.enums import HISTORY_SECTIONS, USER_SECTIONS
from facts.storage.cardfile import Source
from facts.storage.errors import CardParseError


class Section(BaseModel):
    model_config = ConfigDict(extra="ignore")

    summary: str = ""
    updated_at: datetime | None = None
    source: Source | None = None


def _sections(names: tuple[str, ...]) -> type[BaseModel]:
    fields: dict[str, Any] = {name: (Section, Field(default_factory=Section)) for name in names}
    return create_model("Sections", __config__=ConfigDict(extra="ignore"), **fields)


UserSections = _sections(USER_SECTIONS)
HistorySections = _sections(HISTORY_SECTIONS)


class Profile(BaseModel):
    """``memory.json``: a user's global profile and history summaries."""

    model_config = ConfigDict(extra="ignore")

    version: int = 1
    revision: int = 0
    user_id: str
    updated_at: datetime | None = None
    user: UserSections = Field(default_factory=UserSections)  # type: ignore[valid-type]
    history: HistorySections = Field(default_factory=HistorySections)  # type: ignore[valid-type]

    def section(self, name: str) -> Section:
        group = self.user if name in USER_SECTIONS else self.history
        return getattr(group, name)

    def set_section(self, name: str, section: Section) -> None:
        if name not in USER_SECTIONS and name not in HISTORY_SECTIONS:
            raise KeyError(name)
        group = self.user if name in USER_SECTIONS else self.history
        setattr(group, name, section)


def dump_profile(profile: Profile) -> str:
    return json.dumps(profile.model_dump(mode="json"), ensure_ascii=False, indent=2) + "\n"


def parse_profile(text: str, path: Path) -> Profile:
    try:
        return Profile.model_validate_json(text)
    except ValidationError as exc:
        raise CardParseError(path, str(exc.errors()[0]["msg"])) from None
