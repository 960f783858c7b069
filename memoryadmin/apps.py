from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.apps import AppConfig
from django.conf import settings


class MemoryAdminConfig(AppConfig):
    name = "memoryadmin"
    verbose_name = "Agents' front door"

    def ready(self) -> None:
        from . import logging_utils

        logging_utils.connect()  # structured log lines for extraction runs and curation
        make_sqlite_folders(settings.DATABASES)


def make_sqlite_folders(databases: Mapping[str, Mapping[str, Any]]) -> None:
    """Create the folder of every SQLite database file, private (0700: it holds the
    turns and candidates), before the first connection: SQLite creates the file but
    not its folder. Done at start-up rather than when settings are imported, so that
    reading settings never writes to disk."""
    for database in databases.values():
        name = str(database.get("NAME") or "")
        if (
            database.get("ENGINE") != "django.db.backends.sqlite3"
            or name in ("", ":memory:")
            or name.startswith("file:")
        ):
            continue
        Path(name).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
