"""Where the read side's derived files live: the search index's stable name and, beside
it, the cache of derived data (vectors, terms, scans).

``MEMORY_ROOT/.retrieval/`` by default; ``MEMORY_INDEX_DIR`` when the file root is
shared by several machines and each keeps its own index (docs/scaling.md). Each name
is a link to the file's current generation (`facts.storage.sqlitegen`).
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

INDEX_DIR = ".retrieval"
INDEX_FILE = "index.sqlite3"
VECTORS_FILE = "vectors.sqlite3"


def index_path() -> Path:
    # MEMORY_INDEX_DIR: a machine-local index when the file root is shared (scaling.md).
    root, local = settings.MEMORY_ROOT, getattr(settings, "MEMORY_INDEX_DIR", "")
    global _path_memo
    memo = _path_memo
    # Every read asks for it: building the Path each time cost ~10 µs of a ~0.4 ms render.
    if memo is not None and memo[0] is root and memo[1] == local:
        return memo[2]
    path = Path(local) / INDEX_FILE if local else Path(root) / INDEX_DIR / INDEX_FILE
    _path_memo = (root, local, path)
    return path


_path_memo: tuple[object, object, Path] | None = None


def vectors_link(path: Path) -> Path:
    """The vector cache's stable name beside the index's."""
    return path.parent / VECTORS_FILE
