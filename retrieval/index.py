"""The FTS5 index (read side). Owned by the read-side work (issue 4).

`on_cards_changed` is registered with `facts.hooks` and receives every committed batch.
"""

from __future__ import annotations

from collections.abc import Sequence

from facts.store import Card


def on_cards_changed(written: Sequence[Card], deleted: Sequence[Card]) -> None:
    """Keep the index in step with the files (filled in by the read side)."""
    return None
