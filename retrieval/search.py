"""Ranked search over the index (article §7, DESIGN.md §6).

BM25 picks ``2 × limit`` candidates inside the caller's scope, then

    score = -bm25 × decay + 0.2 × confidence,
    decay = 1 for ages under 30 days, else exp(-0.01 × (age_days - 30)).

SQLite's ``bm25()`` is lower-is-better, hence the minus sign. The user, agent and
project always come from the runtime, never from the model.

With ``MEMORY_EMBEDDINGS`` on (the default) the relevance is hybrid (issue 19): the
lexical top ``max(10, 2 × limit)`` and the scope's cards ranked by sentence-vector
similarity are fused by reciprocal rank (k = 60),

    relevance = FUSED_SCALE × Σ 1 / (60 + rank),   score = relevance × decay + 0.2 × confidence,

so a Chinese question finds an English fact, while an exact word still counts. Vector
candidates below `SIMILARITY_FLOOR` are left out: a query about nothing the user said
still finds nothing rather than the least unrelated facts.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from django.conf import settings

from . import index, vectors
from .limits import clamp_limit
from .tokenize import MAX_QUERY_CHARS, query_terms
from .tokens import count_tokens

log = logging.getLogger(__name__)

DECAY_GRACE_DAYS = 30
DECAY_RATE = 0.01
CONFIDENCE_WEIGHT = 0.2
RRF_K = 60
LEXICAL_DEPTH = 10  # the lexical list fused is the top max(10, 2 × limit)
# 1 / (60 + rank) is 0.016 at rank 1 and moves by 0.0003 a rank: scaled by 100 the
# relevance spans about 1.6–3.3, the size of a typical -bm25, so the article's 0.2 ×
# confidence stays the tie-breaker it was rather than outweighing a whole rank.
FUSED_SCALE = 100.0
# USE v3 gives short cross-language matches low cosines (时区 → "time zone" 0.33,
# "frontend framework" → 前端 0.19, typos 0.18), so the floor only drops the clearly
# unrelated: on tests/data/hybrid_eval.json recall@5 is 0.94 at 0.10, 0.93 at 0.15,
# 0.89 at 0.20 and 0.88 at 0.25.
SIMILARITY_FLOOR = 0.10
MAX_LIMIT = 100  # callers inside the service (golden queries, the playground); agents get retrieval.limits' 1..10


@dataclass(frozen=True)
class Hit:
    id: str
    content: str
    category: str
    confidence: float
    score: float
    bm25: float | None  # None: found by its vector only
    decay: float
    confidence_part: float
    created_at: datetime
    lexical_rank: int | None = None
    vector_rank: int | None = None
    similarity: float | None = None
    fused: float | None = None  # the relevance (before decay); None when lexical only

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["created_at"] = self.created_at.isoformat()
        return data


def decay_for(age_days: int) -> float:
    return 1.0 if age_days < DECAY_GRACE_DAYS else math.exp(-DECAY_RATE * (age_days - DECAY_GRACE_DAYS))


def age_days(created_at: datetime, now: datetime) -> int:
    """Whole days since creation (never negative)."""
    return max(0, (now - created_at).days)


def final_score(raw_bm25: float, confidence: float, created_at: datetime, now: datetime) -> tuple[float, float, float]:
    """(score, decay, confidence part)."""
    decay = decay_for(age_days(created_at, now))
    part = CONFIDENCE_WEIGHT * confidence
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
    terms = query_terms(query or "")
    buckets = index.scopes(user_id, agent_name, project_id)
    if mode != "lexical" and vectors.enabled() and (query or "").strip():
        return _hybrid(query, [] if mode == "vectors" else terms, buckets, limit=limit, now=now)
    if not terms:
        return []
    rows = index.candidates(terms, buckets, limit=2 * limit, now_ts=now.timestamp())
    hits = []
    for fact_id, content, category, confidence, created_iso, raw in rows:
        created = datetime.fromisoformat(created_iso)
        score, decay, part = final_score(raw, confidence, created, now)
        hits.append(Hit(fact_id, content, category, confidence, score, raw, decay, part, created))
    hits.sort(key=lambda hit: (-hit.score, hit.bm25, hit.id))
    return hits[:limit]


def _hybrid(query: str, terms: list[str], buckets: list[str], *, limit: int, now: datetime) -> list[Hit]:
    depth = max(LEXICAL_DEPTH, 2 * limit)
    now_ts = now.timestamp()
    lexical = index.candidates(terms, buckets, limit=depth, now_ts=now_ts) if terms else []
    try:
        ranked = index.vector_ranking(query[:MAX_QUERY_CHARS], buckets, now_ts=now_ts)
    except vectors.EmbeddingUnavailable:
        # Search must answer: without the model it is today's lexical search.
        log.exception("vector search unavailable; answering lexically")
        ranked = []
    close = [(fid, sim) for fid, sim in ranked[:depth] if sim >= SIMILARITY_FLOOR]
    fused: dict[str, float] = {}
    for rank, row in enumerate(lexical, 1):
        fused[row[0]] = fused.get(row[0], 0.0) + 1.0 / (RRF_K + rank)
    for rank, (fid, _sim) in enumerate(close, 1):
        fused[fid] = fused.get(fid, 0.0) + 1.0 / (RRF_K + rank)
    if not fused:
        return []
    lex = {row[0]: (rank, row) for rank, row in enumerate(lexical, 1)}
    vec = {fid: (rank, sim) for rank, (fid, sim) in enumerate(close, 1)}
    sims = dict(ranked)
    known = {row[0]: row[1:5] for row in lexical}
    known.update(index.card_fields([fid for fid in fused if fid not in known]))
    hits = []
    for fid, rrf in fused.items():
        if fid not in known:  # deleted between the two reads
            continue
        content, category, confidence, created_iso = known[fid]
        created = datetime.fromisoformat(created_iso)
        decay = decay_for(age_days(created, now))
        relevance = FUSED_SCALE * rrf
        part = CONFIDENCE_WEIGHT * confidence
        lex_rank, lex_row = lex.get(fid, (None, None))
        hits.append(
            Hit(
                id=fid,
                content=content,
                category=category,
                confidence=confidence,
                score=relevance * decay + part,
                bm25=lex_row[5] if lex_row else None,
                decay=decay,
                confidence_part=part,
                created_at=created,
                lexical_rank=lex_rank,
                vector_rank=vec[fid][0] if fid in vec else None,
                similarity=round(sims[fid], 4) if fid in sims else None,
                fused=relevance,
            )
        )
    hits.sort(key=lambda hit: (-hit.score, hit.id))
    return hits[:limit]


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
    numbers would only cost the model tokens) each result also carries its score
    breakdown under ``"explain"``.

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
    visible: list[dict[str, object]] = [
        {
            "id": hit.id,
            "content": hit.content,
            "category": hit.category,
            "confidence": hit.confidence,
            "score": round(hit.score, 4),
            **({"explain": breakdown(hit)} if explain else {}),
        }
        for hit in hits
    ]
    cap = settings.MEMORY_SEARCH_TOKEN_CAP
    if visible and count_tokens(json.dumps(visible[:1], ensure_ascii=False)) > cap:
        # The best hit alone is too long: the answer is that hit, cut (without
        # recounting the whole list once per dropped result first).
        return json.dumps([_cut_to_fit(visible[0], cap)], ensure_ascii=False)
    text = json.dumps(visible, ensure_ascii=False)
    while len(visible) > 1 and count_tokens(text) > cap:
        visible.pop()
        text = json.dumps(visible, ensure_ascii=False)
    return text


def breakdown(hit: Hit) -> dict[str, object]:
    """How a hit's score came about (playground, ``memory_search --json``)."""
    return {
        "lexical_rank": hit.lexical_rank,
        "bm25": None if hit.bm25 is None else round(hit.bm25, 4),
        "vector_rank": hit.vector_rank,
        "similarity": hit.similarity,
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
