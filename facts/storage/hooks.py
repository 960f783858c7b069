"""How the read side learns about changes without the write side importing it.

The retrieval app registers its listeners in `AppConfig.ready`; `facts.storage.writer` calls
`cards_changed` once per committed batch while the bucket locks are still held, and
`cards_writing` just before, while the batch's files are being fsynced. Profiles go
through the same `commit` but are not indexed, so there is no profile hook: add one
here, called from `commit`, when a listener needs it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from facts.storage.cardfile import Card

log = logging.getLogger(__name__)

CardsListener = Callable[[Sequence["Card"], Sequence["Card"]], None]
CardsPreparer = Callable[[Sequence["Card"]], None]

_card_listeners: list[CardsListener] = []
_card_preparers: list[CardsPreparer] = []


def on_cards_changed(listener: CardsListener) -> CardsListener:
    if listener not in _card_listeners:
        _card_listeners.append(listener)
    return listener


def on_cards_writing(preparer: CardsPreparer) -> CardsPreparer:
    if preparer not in _card_preparers:
        _card_preparers.append(preparer)
    return preparer


def cards_changed(written: Sequence[Card], deleted: Sequence[Card]) -> None:
    """`written`: cards in their new state (any status); `deleted`: cards whose file is gone."""
    for listener in _card_listeners:
        listener(written, deleted)


def cards_writing(cards: Sequence[Card]) -> None:
    """`cards` are being written (not durable yet, and a write may still fail).

    A preparer may compute what its `cards_changed` listener will need (the index
    tokenizes) so that the work overlaps the disk's fsyncs instead of following them;
    it must not publish anything. Its errors are logged, never raised: the listener
    does the work itself when nothing was prepared.
    """
    for preparer in _card_preparers:
        try:
            preparer(cards)
        except Exception:
            log.exception("preparing %d card writes failed", len(cards))


# Background work a worker process runs beside its tasks (the read side's follower of
# other machines' writes, retrieval.follow), started by `manage.py db_worker`.
_worker_starters: list[Callable[[], object]] = []


def on_worker_start(starter: Callable[[], object]) -> Callable[[], object]:
    if starter not in _worker_starters:
        _worker_starters.append(starter)
    return starter


def worker_started() -> None:
    for starter in _worker_starters:
        starter()
