"""The index's row format: what one active card becomes in the search index.

A row is a tuple in the column order of `COLUMNS` (the ``cards`` table of
`retrieval.indexdb`); `CONTENT` … `NTOK` name its positions for the modules that read
rows (writes, rebuilds, drift, the scan cache). Also the buckets a search or render
reads (`bucket_key`, `scopes`, and `scope_term`, the one FTS term standing for a
bucket), the `signature` drift compares, and the rows a rebuild's scan computes
(`ScanRow`: in the scanning processes of `facts.storage.snapshots.snapshot`, on every core).
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from collections.abc import Sequence
from itertools import chain
from typing import NamedTuple

from facts.enums import CardStatus
from facts.storage.cardfile import Card
from facts.storage.ids import normalize_agent
from facts.storage.scan import Scanned
from facts.storage.snapshots import FileSnapshot

from . import derived, embedding, tokens
from .indexdb import QUEUE_CORRECTIONS, QUEUE_OTHERS, SCHEMA_VERSION
from .tokenize import load_dictionary

COLUMNS = (
    "id, scope, bucket, user_id, agent_name, project_id, category, confidence, created_at, created_ts, "
    "expires_ts, content, terms, dl, sig, vhash, thash, ntok, queue"
)


CONTENT = 11  # positions in a row


TERMS = 12


DL = 13


SIG = 14


VHASH = 15


THASH = 16


NTOK = 17


def bucket_key(*, user_id: str | None = None, agent_name: str | None = None, project_id: str | None = None) -> str:
    """The exact bucket a card lives in, as one string."""
    if user_id is not None:
        return f"u\x1f{user_id}\x1f{normalize_agent(agent_name)}"
    if not project_id:
        raise ValueError("a scope needs a user_id or a project_id")
    return f"p\x1f{project_id}"


def scopes(user_id: str, agent_name: str | None, project_id: str | None) -> list[str]:
    """The buckets a user × agent (× project) reads: its own, and the project's."""
    buckets = [bucket_key(user_id=user_id, agent_name=agent_name)]
    if project_id:
        buckets.append(bucket_key(project_id=project_id))
    return buckets


def scope_term(bucket: str) -> str:
    """The single FTS term standing for a bucket (letters and digits only, so the FTS
    tokenizer keeps it whole)."""
    return "s" + hashlib.sha256(bucket.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def card_bucket(card: Card) -> str:
    if card.user_id is not None:
        return bucket_key(user_id=card.user_id, agent_name=card.agent_name)
    return bucket_key(project_id=card.project_id)


def _iso(card: Card) -> str:
    return card.created_at.isoformat()


def _signature(bucket: str, category: str, confidence: float, created: str, expires: str, content: str) -> str:
    parts = (str(SCHEMA_VERSION), bucket, category, repr(confidence), created, expires, content)
    return hashlib.sha1("\x1e".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def indexed(card: Card) -> bool:
    """Which cards the index holds: the active ones. Cards past `expires_at` stay until
    they are expired for good and are filtered out at query time (so that whether a card
    is indexed never depends on the clock)."""
    return card.status == CardStatus.ACTIVE


# Terms of recently written contents: `prepare` tokenizes a batch while its files are
# being fsynced, `update` then finds the terms here. Bounded; a miss only costs time.
_recent_terms: dict[str, derived.Terms] = {}
_RECENT_TERMS = 4096


def remember_scanned(snap: FileSnapshot) -> None:
    """Keep the terms a rebuild's scan had to compute (new or hand-edited texts) for
    `update`: a hand-edited card is committed again during the rebuild (it gets a
    revision), and that commit tokenized it a second time."""
    for item in snap.cards.values():
        scanned = scanned_row(item)
        if scanned is not None and scanned.terms.fresh:
            if len(_recent_terms) >= _RECENT_TERMS:
                return
            _recent_terms[scanned.row[CONTENT]] = scanned.terms


def terms_for(content: str) -> derived.Terms:
    terms = _recent_terms.get(content)
    if terms is None:
        terms = derived.compute(content)
        if len(_recent_terms) >= _RECENT_TERMS:
            _recent_terms.clear()
        _recent_terms[content] = terms
    return terms


def row_for(card: Card, terms: derived.Terms | None = None) -> tuple:
    if terms is None:
        terms = terms_for(card.content)
    text = terms.terms
    # Each part made once: the signature repeats the bucket and the dates.
    bucket = card_bucket(card)
    category = card.category.value
    created = _iso(card)
    expires = card.expires_at
    return (
        card.id,
        scope_term(bucket),
        bucket,
        card.user_id,
        card.agent_name if card.user_id is not None else None,
        card.project_id if card.user_id is None else None,
        category,
        card.confidence,
        created,
        card.created_at.timestamp(),
        expires.timestamp() if expires else None,
        card.content,
        text,
        len(text.split()),
        _signature(bucket, category, card.confidence, created, expires.isoformat() if expires else "", card.content),
        embedding.content_hash(card.content) if embedding.enabled() else None,
        terms.hash,
        terms.ntok,
        QUEUE_CORRECTIONS if category == "correction" else QUEUE_OTHERS,
    )


def scan_prepare() -> None:
    """Before the scanning processes fork: load jieba once for all of them when the
    scan tokenizes every card. A normal rebuild tokenizes only what the cache lacks, so
    a scanning process loads it on its first miss: loading it up front cost ~1 s of
    serial time and ~100 MB in the parent even when nothing missed."""
    if derived.tokenizes_everything():
        load_dictionary()


class ScanRow(NamedTuple):
    """What a rebuild's scan computes for an indexed card: its terms and its index row."""

    terms: derived.Terms
    row: tuple


def scan_row(card: Card) -> ScanRow | None:
    """Run in the scanning processes of `facts.storage.snapshots.snapshot`: the card's index row,
    with the cached terms of its text (else tokenized there). That puts a rebuild's
    jieba work and the rows' hashing (~35 µs a card) on every core, and spares the
    parent the card itself (`facts.storage.scan.Scanned`). None for a card the index does
    not hold."""
    if not indexed(card):
        return None
    terms = derived.lookup(card.content)
    return ScanRow(terms, row_for(card, terms))


def scanned_row(item: Scanned) -> ScanRow | None:
    """The scan's `ScanRow` of a snapshot item (computed here when the scan had none)."""
    found = item.extra.get(SCAN_EXTRA, item)
    if found is item:
        card = item.card
        found = None if card is None else scan_row(card)
        item.extra[SCAN_EXTRA] = found
    return found


SCAN_EXTRA = "index"

# From this many cards without their rows (a snapshot of cards already in memory), the
# rows are made on every core.
PARALLEL_ROWS = 4000
_ROWS_CHUNK = 2000
_pending: list[Card] = []  # the cards `_rows_of` works on, inherited by the forked workers


def _scan_rows(cards: Sequence[Card]) -> list[ScanRow | None]:
    """`scan_row` of many cards, their cached terms read in batches."""
    live = [card for card in cards if indexed(card)]
    made = iter(
        [ScanRow(t, row_for(c, t)) for c, t in zip(live, derived.lookup_many([c.content for c in live]), strict=True)]
    )
    return [next(made) if indexed(card) else None for card in cards]


def _rows_of(span: tuple[int, int]) -> list[ScanRow | None]:
    """In a worker: the rows of `_pending[start:end]`."""
    return _scan_rows(_pending[span[0] : span[1]])


def scanned_rows(snap: FileSnapshot) -> list[ScanRow]:
    """The `ScanRow` of every card of `snap` the index holds. A snapshot read by the
    scanning processes has them all; the cards of one made in memory (records) get
    theirs here, on every core when there are many, each card's cached terms read in
    batches rather than one query a card."""
    items = list(snap.cards.values())
    todo = [item for item in items if SCAN_EXTRA not in item.extra]
    if todo:
        global _pending
        cards = [item.card for item in todo]
        workers = min(os.cpu_count() or 1, 4)
        if len(cards) >= PARALLEL_ROWS and workers > 1:
            derived.close_reader()  # each worker opens its own
            # Loaded once here, shared by the workers (each would load its own).
            load_dictionary()
            tokens.encoding()
            _pending = cards  # type: ignore[assignment]
            spans = [(i, min(i + _ROWS_CHUNK, len(cards))) for i in range(0, len(cards), _ROWS_CHUNK)]
            try:
                with multiprocessing.get_context("fork").Pool(workers) as pool:
                    rows = list(chain.from_iterable(pool.imap(_rows_of, spans)))
            finally:
                _pending = []
        else:
            rows = _scan_rows(cards)  # type: ignore[arg-type]
        for item, row in zip(todo, rows, strict=True):
            item.extra[SCAN_EXTRA] = row
    return [item.extra[SCAN_EXTRA] for item in items if item.extra[SCAN_EXTRA] is not None]
