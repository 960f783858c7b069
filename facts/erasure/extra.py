"""Rows another app keeps that an erasure removes too, registered by that app at start.

The write side never imports the read side (docs/architecture.md): the read side's
saved search checks (golden queries) name cards and users, so `retrieval`'s
`AppConfig.ready` registers how to find them for a scope and how to delete them. The dry
run lists each registered kind under its name (`plan.Plan.items`), and `erase` deletes
them in the same transaction as the write side's own rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from facts.erasure.scope import Scope


@dataclass(frozen=True)
class ExtraRows:
    """One kind of row: `find(scope, fact_ids)` gives the primary keys an erasure of
    `scope` (whose cards are `fact_ids`) removes; `delete(keys)` removes them."""

    kind: str
    find: Callable[[Scope, set[str]], list[int]]
    delete: Callable[[Sequence[int]], None]


_registered: dict[str, ExtraRows] = {}


def register(
    kind: str, *, find: Callable[[Scope, set[str]], list[int]], delete: Callable[[Sequence[int]], None]
) -> None:
    """Called once per kind by an app's `ready` (again with the same kind: replaced)."""
    _registered[kind] = ExtraRows(kind, find, delete)


def registered() -> list[ExtraRows]:
    return list(_registered.values())
