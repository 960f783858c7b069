"""Ranked search over the index (docs/design.md §8; issue 36).

A query is first reduced to what it asks about (`query.core`: "When did I mention the
museum?" → "the museum"), then every candidate card gets a relevance from two kinds of
evidence, each on a scale that does not depend on the query or the limit:

    lexical  = bm25 / Σ idf(query terms)       about 1 for a card holding every term once
    vector   = cosine − QUESTION_PENALTY × max(0, the card's question-ness)
    relevance = LEXICAL_WEIGHT × lexical + VECTOR_WEIGHT × vector (+ DATE_WEIGHT)

so a card that matches the query's rare words outranks one matching only its common
ones, whatever the vectors say, and where the words do not meet (another language, a
paraphrase) the vectors decide. The candidates are every lexical match (up to
`LEXICAL_DEPTH`) and the `VECTOR_DEPTH` best vector scores: fixed depths, so the top k of
a longer answer is the answer at k. A card found by its vector alone needs a vector
score of `VECTOR_FLOOR` (a query about nothing the user said finds nothing, or only
what matches its words). A question that names a day ("On May 2nd, what did I …?",
"5月2日我…", `retrieval.dates`) makes the cards said that day candidates too, with
DATE_WEIGHT more relevance: every card knows when its words were said. Then

    score = relevance × (1 − DECAY_WEIGHT × (1 − decay)) + CONFIDENCE_WEIGHT × confidence,
    decay = 1 for ages under 30 days, else exp(-0.01 × (age_days - 30))

— the article's decay as an order among comparably relevant facts, not a filter
(``MEMORY_SEARCH_DECAY_WEIGHT=1`` is the article's formula itself). Ties go to the
stronger relevance, then to the id. With ``MEMORY_EMBEDDINGS`` off, or when the model
cannot load, the vector part is 0 and the same formula ranks lexically.

The measurements that chose each constant are in docs/read-path.md. The user, agent and
project always come from the runtime, never from the model.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import numpy as np
from django.conf import settings

from . import dates, embedding, indexrows, reads
from .limits import clamp_limit
from .query import core
from .tokenize import MAX_QUERY_CHARS, query_terms
from .tokens import count_tokens

log = logging.getLogger(__name__)

DECAY_GRACE_DAYS = 30
DECAY_RATE = 0.01
# Relevance runs from 0 to about 2: a 0.5 confidence gap moves a fact by 0.025, a
# tie-breaker (the article's 0.2 was sized for raw bm25, 2–10).
CONFIDENCE_WEIGHT = 0.05
LEXICAL_WEIGHT = 1.0
VECTOR_WEIGHT = 1.5
# How much a card's being a question counts against its vector score.
QUESTION_PENALTY = 0.5
# Fixed candidate depths: every lexical match up to LEXICAL_DEPTH, the VECTOR_DEPTH best
# vector scores (agents ask for at most 10, the playground for 100).
LEXICAL_DEPTH = 200
VECTOR_DEPTH = 100
# A card found by its vector alone must have at least this cosine (after the question
# penalty); a lexical match is evidence enough on its own.
VECTOR_FLOOR = 0.15
# The vectors embed the question without its frame (True) or as asked (False).
FRAMELESS_VECTORS = True
# A card said on a day the question names ("On May 2nd, what did I …?") has this much
# more relevance, and is a candidate whatever its words: what a card holding every one
# of the question's words gets from them (retrieval/dates.py; 0.5–1.0 measured alike,
# 0.3 lower: docs/read-path.md).
DATE_WEIGHT = 1.0
DATE_DEPTH = 200
MAX_LIMIT = 100  # callers inside the service (golden queries, the playground); agents get retrieval.limits' 1..10


@dataclass(frozen=True)
class Hit:
    id: str
    content: str
    category: str
    confidence: float
    score: float
    bm25: float | None  # None: not a lexical match
    decay: float  # the factor the relevance is multiplied by (1 − weight × (1 − article decay))
    confidence_part: float
    created_at: datetime
    lexical_rank: int | None = None
    vector_rank: int | None = None
    similarity: float | None = None
    fused: float | None = None  # the relevance: lexical + vector (+ date) parts
    lexical: float | None = None  # LEXICAL_WEIGHT × bm25 / Σ idf
    vector: float | None = None  # VECTOR_WEIGHT × (cosine − question penalty)
    date: float | None = None  # DATE_WEIGHT: said on a day the question names

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["created_at"] = self.created_at.isoformat()
        return data


def decay_for(age_days: int) -> float:
    """The article's decay: 1 under 30 days, then exp(-0.01 × (days − 30))."""
    return 1.0 if age_days < DECAY_GRACE_DAYS else math.exp(-DECAY_RATE * (age_days - DECAY_GRACE_DAYS))


def decay_weight() -> float:
    return float(getattr(settings, "MEMORY_SEARCH_DECAY_WEIGHT", 0.1))


def order_factor(age: int, weight: float | None = None) -> float:
    """What a relevance is multiplied by at this age: the article's decay, weighted (0:
    age never counts, 1: the article's formula)."""
    weight = decay_weight() if weight is None else weight
    return 1.0 - weight * (1.0 - decay_for(age))


def age_days(created_at: datetime, now: datetime) -> int:
    """Whole days since creation (never negative)."""
    return max(0, (now - created_at).days)


ARTICLE_CONFIDENCE_WEIGHT = 0.2


def final_score(raw_bm25: float, confidence: float, created_at: datetime, now: datetime) -> tuple[float, float, float]:
    """(score, decay, confidence part) of the article's own formula on a raw bm25,
    ``-bm25 × decay + 0.2 × confidence``: the reference the ranking is documented
    against (search itself ranks by `_rank`)."""
    decay = decay_for(age_days(created_at, now))
    part = ARTICLE_CONFIDENCE_WEIGHT * confidence
    return -raw_bm25 * decay + part, decay, part


def clamp(value: object, low: int, high: int, default: int) -> int:
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return default
    return max(low, min(number, high))


def search(
    query: str,
    *,
    user_id: str,
    agent_name: str | None,
    project_id: str | None = None,
    limit: int = 5,
    now: datetime | None = None,
    mode: str = "hybrid",
) -> list[Hit]:
    """The best `limit` live facts of this user × agent (and project, when given).
    `mode` "lexical" or "vectors" ranks by one half alone (benchmarks, the playground);
    "hybrid" is lexical alone when embeddings are off."""
    limit = clamp(limit, 1, MAX_LIMIT, 5)
    now = now or datetime.now(UTC)
    asked = (query or "")[:MAX_QUERY_CHARS]
    text = core(asked)
    days = dates.mentioned(asked)
    buckets = indexrows.scopes(user_id, agent_name, project_id)
    now_ts = now.timestamp()
    said = set(reads.said_on(days, buckets, limit=DATE_DEPTH, now_ts=now_ts)) if days and DATE_WEIGHT else set()
    terms = query_terms(text) if mode != "vectors" else []
    lexical, weight = reads.lexical(terms, buckets, limit=LEXICAL_DEPTH, now_ts=now_ts) if terms else ([], 0.0)
    ids: list[str] = []
    vector_part = np.zeros(0, dtype=np.float32)
    sims = vector_part
    if mode != "lexical" and embedding.enabled() and text.strip():
        try:
            ids, sims, questions = reads.vector_scores(text if FRAMELESS_VECTORS else asked, buckets, now_ts=now_ts)
            vector_part = sims - QUESTION_PENALTY * np.maximum(questions, 0.0)
        except embedding.EmbeddingUnavailable:
            # Search must answer: without the model it is the lexical search.
            log.exception("vector search unavailable; answering lexically")
            ids = []
    hits = _rank(lexical, weight, ids, sims, vector_part, limit=limit, now=now, said=said)
    return hits[:limit]


def _rank(
    lexical: list[tuple],
    weight: float,
    ids: list[str],
    sims: np.ndarray,
    vector_part: np.ndarray,
    *,
    limit: int,
    now: datetime,
    said: set[str],
) -> list[Hit]:
    """The candidates' hits, best first: at least the best `limit`, exactly as if every
    candidate were scored (those that cannot reach the top `limit` are not read).
    `said`: the cards said on a day the question names."""
    position = {fid: i for i, fid in enumerate(ids)}
    # The vector candidates: the VECTOR_DEPTH best vector scores (ties by id: ids are
    # in id order).
    depth = min(VECTOR_DEPTH, len(ids))
    if depth:
        best = np.argpartition(-vector_part, depth - 1)[:depth] if depth < len(ids) else np.arange(len(ids))
        chosen = sorted(best.tolist(), key=lambda i: (-float(vector_part[i]), i))
    else:
        chosen = []
    vector_rank = {ids[i]: rank for rank, i in enumerate(chosen, 1)}
    lex = {row[0]: (rank, row[5]) for rank, row in enumerate(lexical, 1)}
    weight = weight or 1.0
    # (relevance, lexical part, vector part, id)
    scored: list[tuple[float, float | None, float | None, str]] = []
    for fid in dict.fromkeys([*lex, *vector_rank, *sorted(said)]):
        bm25 = lex[fid][1] if fid in lex else None
        at = position.get(fid)
        closeness = float(vector_part[at]) if at is not None else None
        dated = DATE_WEIGHT if fid in said else 0.0
        if bm25 is None and not dated and (closeness is None or closeness < VECTOR_FLOOR):
            continue
        lexical_part = None if bm25 is None else LEXICAL_WEIGHT * (-bm25 / weight)
        vec = None if closeness is None else VECTOR_WEIGHT * closeness
        scored.append(((lexical_part or 0.0) + (vec or 0.0) + dated, lexical_part, vec, fid))
    if not scored:
        return []
    scored.sort(key=lambda row: -row[0])
    # Age multiplies a relevance by (1 − w) … 1 and confidence adds 0 … CONFIDENCE_WEIGHT:
    # a candidate whose best case is below the limit-th one's worst case cannot be shown.
    dweight = min(max(decay_weight(), 0.0), 1.0)
    worst = scored[min(limit, len(scored)) - 1][0] * (1.0 - dweight)
    scored = [row for row in scored if row[0] + CONFIDENCE_WEIGHT >= worst]
    fields = {row[0]: row[1:5] for row in lexical}
    fields.update(reads.card_fields([row[3] for row in scored if row[3] not in fields]))
    hits = []
    for relevance, lexical_part, vec, fid in scored:
        if fid not in fields:  # deleted between the two reads
            continue
        content, category, confidence, created_iso = fields[fid]
        created = datetime.fromisoformat(created_iso)
        factor = order_factor(age_days(created, now), dweight)
        part = CONFIDENCE_WEIGHT * confidence
        at = position.get(fid)
        hits.append(
            Hit(
                id=fid,
                content=content,
                category=category,
                confidence=confidence,
                score=relevance * factor + part,
                bm25=lex[fid][1] if fid in lex else None,
                decay=factor,
                confidence_part=part,
                created_at=created,
                lexical_rank=lex[fid][0] if fid in lex else None,
                vector_rank=vector_rank.get(fid),
                similarity=None if at is None else round(float(sims[at]), 4),
                fused=relevance,
                lexical=lexical_part,
                vector=vec,
                date=DATE_WEIGHT if fid in said else None,
            )
        )
    hits.sort(key=lambda h: (-h.score, -(h.fused or 0.0), -(h.lexical or 0.0), h.id))
    return hits


def memory_search_json(
    query: str,
    *,
    user_id: str,
    agent_name: str | None,
    project_id: str | None = None,
    limit: int = 5,
    explain: bool = False,
) -> str:
    """The ``memory_search`` tool's answer: a JSON list of ``{id, content, category,
    confidence, score}``, at most 10 results and at most MEMORY_SEARCH_TOKEN_CAP tokens.
    With `explain` (``manage.py memory_search --json``, never the agents' tool: the
    numbers would only cost the model tokens) each result of that same answer also
    carries its score breakdown under ``"explain"``, added after the cap (issue 36: the
    breakdown counted against it, so at limit 10 the command showed ~5 of the tool's
    results).

    Results are dropped from the end until the answer fits; when the best hit alone is
    too long, its content is cut to fit, ends with "…" and the result carries
    ``"truncated": true``. Hits never come back as an empty answer.
    """
    hits = search(
        query,
        user_id=user_id,
        agent_name=agent_name,
        project_id=project_id,
        limit=clamp_limit(limit),
    )
    answer = _capped(hits, settings.MEMORY_SEARCH_TOKEN_CAP)
    if explain:
        by_id = {hit.id: hit for hit in hits}
        answer = [{**result, "explain": breakdown(by_id[str(result["id"])])} for result in answer]
    return json.dumps(answer, ensure_ascii=False)


def _capped(hits: list[Hit], cap: int) -> list[dict[str, object]]:
    """The tool's results for `hits`, in their order, within `cap` tokens as JSON."""
    visible: list[dict[str, object]] = [
        {
            "id": hit.id,
            "content": hit.content,
            "category": hit.category,
            "confidence": hit.confidence,
            "score": round(hit.score, 4),
        }
        for hit in hits
    ]
    if visible and count_tokens(json.dumps(visible[:1], ensure_ascii=False)) > cap:
        # The best hit alone is too long: the answer is that hit, cut (without
        # recounting the whole list once per dropped result first).
        return [_cut_to_fit(visible[0], cap)]
    while len(visible) > 1 and count_tokens(json.dumps(visible, ensure_ascii=False)) > cap:
        visible.pop()
    return visible


def breakdown(hit: Hit) -> dict[str, object]:
    """How a hit's score came about (playground, ``memory_search --json``)."""
    return {
        "lexical_rank": hit.lexical_rank,
        "bm25": None if hit.bm25 is None else round(hit.bm25, 4),
        "vector_rank": hit.vector_rank,
        "similarity": hit.similarity,
        "lexical": None if hit.lexical is None else round(hit.lexical, 4),
        "vector": None if hit.vector is None else round(hit.vector, 4),
        "date": hit.date,
        "fused": None if hit.fused is None else round(hit.fused, 4),
        "decay": round(hit.decay, 4),
        "confidence_part": round(hit.confidence_part, 4),
    }


ELLIPSIS = "…"


def _cut_to_fit(result: dict[str, object], cap: int) -> dict[str, object]:
    """`result` with its content cut (at a character) so that ``[result]`` fits `cap`
    tokens. The id, category and score stay whole: the agent can still name the card.
    Below the size of a result with no content at all the cap cannot be met; the result
    then keeps just the ellipsis (an answer slightly over an absurd cap beats none)."""
    content = str(result["content"])

    def shortened(length: int) -> dict[str, object]:
        return {**result, "content": content[:length].rstrip() + ELLIPSIS, "truncated": True}

    def fits(length: int) -> bool:
        return count_tokens(json.dumps([shortened(length)], ensure_ascii=False)) <= cap

    # The longest prefix that fits, by bisection: token counts grow with the prefix
    # (up to a merge at the cut, which the walk back below settles).
    # A token of cl100k rarely spans 16 characters: past that bound a prefix would only
    # save counting time on a huge card, it could not fit anyway.
    low, high = 0, min(len(content), 16 * max(cap, 1))
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    while low > 0 and not fits(low):
        low -= 1
    return shortened(low)
