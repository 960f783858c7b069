"""How many results an agent's search may ask for: 1 to 10, 5 when unsaid (docs/design.md §8).

One rule for every door: the ``memory_search`` tool, the HTTP API's ``/search``, the
in-process memory and the dashboard's search form. It lives apart from
`retrieval.search`, with no Django import, because the agents' side of
`memoryadmin.langchain_memory` (the tool, `MemoryClient`) runs in agent processes that
never configure Django.
"""

from __future__ import annotations

SEARCH_LIMIT_MIN = 1
SEARCH_LIMIT_MAX = 10
SEARCH_LIMIT_DEFAULT = 5


def clamp_limit(limit: object) -> int:
    """`limit` as a whole number within 1..10; the default for anything not a number
    (a model may send ``"lots"``: the search still answers)."""
    try:
        number = int(limit)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return SEARCH_LIMIT_DEFAULT
    return max(SEARCH_LIMIT_MIN, min(number, SEARCH_LIMIT_MAX))
