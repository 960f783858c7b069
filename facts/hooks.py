"""How the read side learns about changes without the write side importing it.

The retrieval app registers its listeners in `AppConfig.ready`; `facts.writer` calls
`cards_changed` once per committed batch while the bucket locks are still held.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import Card, Profile

log = logging.getLogger(__name__)

CardsListener = Callable[[Sequence["Card"], Sequence["Card"]], None]
ProfileListener = Callable[["Profile"], None]

_card_listeners: list[CardsListener] = []
_profile_listeners: list[ProfileListener] = []


def on_cards_changed(listener: CardsListener) -> CardsListener:
    if listener not in _card_listeners:
        _card_listeners.append(listener)
    return listener


def on_profile_changed(listener: ProfileListener) -> ProfileListener:
    if listener not in _profile_listeners:
        _profile_listeners.append(listener)
    return listener


def cards_changed(written: Sequence[Card], deleted: Sequence[Card]) -> None:
    """`written`: cards in their new state (any status); `deleted`: cards whose file is gone."""
    for listener in _card_listeners:
        listener(written, deleted)


def profile_changed(profile: Profile) -> None:
    for listener in _profile_listeners:
        listener(profile)
