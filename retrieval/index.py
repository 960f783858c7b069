"""Keeping the search index in step with the writes: the write function's hooks.

The search index (`retrieval.indexdb`: its file and schema) is a derived copy of the
active cards, rebuildable from the files. Every committed write reaches it through
`facts.storage.hooks`, registered by `retrieval.apps`: `prepare` tokenizes and embeds
the cards while their files are fsynced, `on_cards_changed` then replaces their rows
(`update`, through `retrieval.indexwrite.apply`). A failure here never fails the
write: the card shows as drift (`retrieval.indexdrift`) until the next rebuild
(`retrieval.indexbuild`); an index being rebuilt meanwhile catches up from the files.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from facts.storage.cardfile import Card

from . import indexwrite, vectorcache
from .indexconn import retrying
from .indexdb import IndexUnavailable, after_write
from .indexpaths import index_path
from .indexrows import indexed, row_for, terms_for

log = logging.getLogger(__name__)


def update(written: Sequence[Card], deleted: Sequence[Card]) -> None:
    """Upsert the active cards of `written`, remove the others and the deleted ones."""
    # Tokenize before taking the write lock: the transaction stays short.
    puts = [row_for(card) for card in written if indexed(card)]
    removals = [card.id for card in written if not indexed(card)] + [card.id for card in deleted]
    if puts or removals:
        # A write never waits for a rebuild: the rebuild's catch-up reads these files.
        retrying(lambda conn: indexwrite.apply(conn, puts, removals), writing=True)
        after_write(index_path())


def prepare(cards: Sequence[Card]) -> None:
    """The write function's preparation hook: tokenize and embed while the disk works."""
    live = [card.content for card in cards if indexed(card)]
    for content in live:
        terms_for(content)
    vectorcache.prepare(live)


def on_cards_changed(written: Sequence[Card], deleted: Sequence[Card]) -> None:
    """The write function's hook. The files and the mirror are already written when it
    runs, so a failure here must not undo or fail the write: it is logged, and
    ``reindex --check`` shows the card as drift until the next rebuild."""
    try:
        update(written, deleted)
    except IndexUnavailable as exc:
        # Committed under the commit gate, so the rebuild's catch-up (which holds it
        # exclusively) reads these files: nothing is lost.
        log.info("search index not written for %d cards (%s)", len(written) + len(deleted), exc.message)
    except Exception:
        log.exception("search index update failed for %d cards; run `manage.py reindex`", len(written) + len(deleted))
