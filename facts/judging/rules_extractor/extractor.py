"""Driving the rules over a conversation: each user message is split into sentences and
clauses, each clause is read by the project, English and Chinese rules (or taken as a
bare request), a statement runs on over the clauses that add to it, and the sentence's
markers label it (question, one-off, standing, hedged, correction). `extract_facts`
returns MemoryUpdate `facts` items; `run` is what `facts.judging.extraction` calls.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from facts.enums import Authority, Category, Durability, Scope
from facts.intake.filtering import Row, is_acknowledgement
from facts.judging.rules_extractor.chinese import zh_statement
from facts.judging.rules_extractor.english import en_statement
from facts.judging.rules_extractor.keys import ALIASES, PREFERENCE_TOPICS, TOOL_TOPICS, key_of, slug_of, topic_of
from facts.judging.rules_extractor.markers import (
    EN_DURABLE,
    EN_DURABLE_WORDS,
    EN_HEDGE,
    EN_HYPOTHETICAL,
    EN_IMPERATIVE,
    EN_TEMPORARY,
    EN_TEMPORARY_PREFIX,
    ZH_DURABLE,
    ZH_EVENT,
    ZH_HEDGE,
    ZH_HYPOTHETICAL,
    ZH_IMPERATIVE,
    ZH_TEMPORARY,
    ZH_TEMPORARY_PREFIX,
    asks,
    is_question,
    strip_leads,
)
from facts.judging.rules_extractor.statement import HEDGED, LIKELY, SURE, UNSURE, Statement, en_content
from facts.judging.rules_extractor.text import CLAUSE_BREAK, SENTENCE_END, clean, has_han, mask, spans
from facts.judging.schemas import normalize_key

_I = re.IGNORECASE

NAME = "rules-v1"

# A statement about the user is one short sentence; longer "sentences" (code, logs,
# pasted documents) are skipped, which also keeps every rule linear in the input.
MAX_SENTENCE_CHARS = 400
# More than this from one message is a document, not a conversation turn.
MAX_FACTS_PER_MESSAGE = 20
# Past this many sentences a message is a pasted document: the rest is not read.
MAX_SENTENCES = 300


# --- project rules ------------------------------------------------------------------------

# Only rules of a repository or project ("this repo uses …"), never a passing remark
# about it ("the app is broken"): no bare "is"/"has", no "the".
_EN_PROJECT = re.compile(
    r"^(?:(?:this|our) (?:repo|repository|project|codebase|code base|monorepo)(?:'s)?\s+"
    r"(?:uses|requires|runs on|targets|follows|prefers|needs|must|should|always|never|only|"
    r"deploys to|is deployed (?:to|on)|is written in|builds with)\b|"
    r"(?:in|for) (?:this|our) (?:repo|repository|project|codebase)\s*,?\s*we\s+(?:always |never |only )?"
    r"(?:use|squash|rebase|deploy|write|follow|require|prefer|run|pin|keep|avoid|target|lint|format|test|"
    r"build|name|tag|release)\b|"
    r"we (?:always |usually |never |only )?(?:use|squash|rebase|deploy|write|follow|require|prefer|run)\b"
    r".{0,200}?\b(?:here|in this (?:repo|repository|project|codebase))\b)",
    _I,
)
_ZH_PROJECT = re.compile(
    r"^(?:这个|本|我们的?|当前)(?:项目|仓库|代码库|repo|工程)(?:里|中|的)?(?:都|统一|一律|必须|要求|规定)?"
    r"(?:用|使用|采用|基于|要求|规定|统一|必须|不允许|禁止|跑在|部署在|遵循)"
)


def _project_statement(clause: str) -> Statement | None:
    if _EN_PROJECT.match(clause) or _ZH_PROJECT.match(clause):
        text = clean(clause)
        # The card lives in the project's own folder: "this repo" is the project, said so
        # the fact reads alone ("这个仓库统一用 PostgreSQL 16" → "项目统一用 PostgreSQL 16").
        said = re.sub(
            r"^(?:(?:in|for) )?(?:this|our) (?:repo|repository|project|codebase|code base|monorepo)\b",
            lambda m: "In the project" if m.group(0).lower().startswith(("in ", "for ")) else "The project",
            text,
            flags=_I,
        )
        said = re.sub(r"^(?:这个|本|我们的?|当前)(?:项目|仓库|代码库|repo|工程)", "项目", said)
        content = said[0].upper() + said[1:] + ("" if has_han(said) else ".")
        topic = topic_of(text, TOOL_TOPICS + PREFERENCE_TOPICS)
        if re.search(r"\b(?:postgres(?:ql)?|mysql|sqlite|mongodb|redis)\b|数据库", text, _I):
            topic = "database"
        subject = re.sub(r"^(?:(?:in|for)\s+)?(?:this|our)\s+\w+\s*,?\s*(?:we\s+)?", "", text, flags=_I)
        key = normalize_key("project_" + (topic or slug_of(subject) or "rule"))
        return Statement(Category.CONTEXT, key[:60], content, LIKELY, scope=Scope.PROJECT)
    return None


# --- driving it ---------------------------------------------------------------------------


@dataclass
class _Found:
    statement: Statement
    start: int
    end: int


_CONTINUATION_STOP = re.compile(
    r"^(?:but|because|so|though|although|since|which|if|unless|and then|then|however|而|但|但是|可是|不过|因为|所以|"
    r"如果|要是|然后|另外|还有|谢谢|thanks|thank you)",
    _I,
)


def _imperative(clause: str, *, marked: bool) -> Statement | None:
    """A request to the assistant ("reply in English", "用中文回答"). Only worth a candidate
    when a marker says how long it holds (labelled by `_label`), or when it names a known
    preference (then it is unsure: one request is not yet a habit)."""
    body = ZH_TEMPORARY_PREFIX.sub("", EN_TEMPORARY_PREFIX.sub("", clause))
    # after "从现在开始，" a request may open with its subject: "变量名统一用英文"
    subject_first = (
        marked and bool(re.search(r"请|统一|一律|都用|都要|要用|改用|用", body)) and not ZH_EVENT.search(body)
    )
    if not body or not (EN_IMPERATIVE.match(body) or ZH_IMPERATIVE.match(body) or subject_first):
        return None
    # "写作其实是一个长期积累的过程", "用来包装代码": a statement about something, not a request
    if has_han(body) and "请" not in body and re.search(r"是|其实|用来|用于", body):
        return None
    in_clause = bool(
        EN_TEMPORARY.search(clause) or ZH_TEMPORARY.search(clause) or EN_DURABLE.search(clause)
        or ZH_DURABLE.search(clause) or body != clause
    )  # fmt: skip
    topic = topic_of(body, PREFERENCE_TOPICS)
    if not (marked or in_clause or topic):
        return None
    confidence = SURE if (marked or in_clause) else UNSURE
    if has_han(body):
        content = "用户要求：" + clean(body).rstrip("吧呀啊").replace("我", "用户")
    else:
        content = en_content("User's request: {x}.", re.sub(r"^please\s+", "", body, flags=_I))
    return Statement(Category.PREFERENCE, key_of("pref", body), content, confidence)


def _analyze(clause: str, *, marked: bool = False) -> Statement | None:
    if not clause:
        return None
    if EN_HYPOTHETICAL.match(clause) or ZH_HYPOTHETICAL.match(clause):
        return None
    return (
        _project_statement(clause) or en_statement(clause) or zh_statement(clause) or _imperative(clause, marked=marked)
    )


# A clause that runs a statement on must be one more item of its list ("I like hiking,
# running, and rock climbing", "我喜欢唱歌，跳舞，摄影"), not a new thought about it.
_EN_ITEM = re.compile(
    r"^(?:and |or |as well as )?(?!(?:i|i'm|i've|it|it's|they|this|that|which|who|we|you|he|she|there|my)\b)[^.!?]{1,40}$",
    _I,
)
_EN_VERBISH = re.compile(
    r"\b(?:is|are|was|were|am|be|been|have|has|had|do|does|did|can|could|will|would|should|make|makes|made|feel|feels|felt|give|gives)\b|'(?:s|re|ve|ll|d)\b",
    _I,
)
_ZH_ITEM = re.compile(r"^(?:和|以及|还有|及)?[^我你他她它这那是让使感觉得会要想吧呢吗啊]{1,10}$")


# The next step of an instruction ("先给结论，再补充必要的解释", "…, then the details").
_NEXT_STEP = re.compile(r"^(?:再|先|并且?|最后|然后再|(?:and )?then\b)", _I)


def _list_item(piece: str, *, instruction: bool = False) -> bool:
    if instruction and _NEXT_STEP.match(piece) and len(piece) <= 40:
        return True
    if has_han(piece):
        return bool(_ZH_ITEM.match(piece))
    return bool(_EN_ITEM.match(piece)) and not _EN_VERBISH.search(piece) and len(piece.split()) <= 5


def _statements(text: str) -> list[_Found]:
    found: list[_Found] = []
    masked, quotes = mask(text)
    for s_start, s_end in spans(masked, SENTENCE_END)[:MAX_SENTENCES]:
        if len(found) >= MAX_FACTS_PER_MESSAGE:
            break
        if s_end - s_start > MAX_SENTENCE_CHARS:
            continue  # pasted code, logs, a wall of text: not a statement about the user
        sentence = text[s_start:s_end]
        question = is_question(sentence)
        # hypotheticals and conditions govern the whole sentence
        lead_free, _, _, _ = strip_leads(sentence)
        if EN_HYPOTHETICAL.match(lead_free) or ZH_HYPOTHETICAL.match(lead_free):
            continue
        clauses = spans(masked, CLAUSE_BREAK, s_start, s_end)

        # In "我喜欢用 vim，你有什么插件推荐吗？" only the last clause asks.
        asking = [question and (i == len(clauses) - 1 or asks(text[a:b])) for i, (a, b) in enumerate(clauses)]
        pending_temporary = pending_durable = pending_correction = pending_memory = False
        modifier_start: int | None = None
        index = 0
        while index < len(clauses):
            c_start, c_end = clauses[index]
            raw = clean(text[c_start:c_end])
            body, _, correction, memory = strip_leads(raw)
            body = clean(body)
            statement = _analyze(body, marked=pending_temporary or pending_durable)
            if statement is None:
                index += 1
                if not body or is_acknowledgement(raw):
                    pending_correction = pending_correction or correction
                    pending_memory = pending_memory or memory
                    if modifier_start is None and (correction or memory):
                        modifier_start = c_start
                    continue
                # a bare modifier ("From now on", "这次", "以后的话") labels the next clause
                unhedged = re.sub(
                    r"^(?:just|only)\s+|\s+only$", "", body, flags=_I
                )  # "Just for today", "for this answer only"
                bare_temp = bool(EN_TEMPORARY.fullmatch(unhedged) or re.fullmatch(rf"(?:{ZH_TEMPORARY.pattern})(?:的话)?(?:先)?", body))  # fmt: skip
                bare_durable = bool(
                    re.fullmatch(rf"(?:please\s+)?(?:{EN_DURABLE_WORDS})", body, _I)
                    or re.fullmatch(rf"(?:{ZH_DURABLE.pattern})(?:的话)?(?:都|也)?", body)
                )
                if bare_temp or bare_durable or correction:
                    pending_temporary = pending_temporary or bare_temp
                    pending_durable = pending_durable or bare_durable
                    pending_correction = pending_correction or correction
                    pending_memory = pending_memory or memory
                    if modifier_start is None:
                        modifier_start = c_start
                    continue
                pending_temporary = pending_durable = pending_correction = pending_memory = False
                modifier_start = None
                continue
            # the statement runs on over clauses that add to it ("…, with examples", "…，也喜欢狗")
            end = c_end
            nxt = index + 1
            while nxt < len(clauses):
                n_start, n_end = clauses[nxt]
                piece = clean(text[n_start:n_end])
                piece_body = clean(strip_leads(piece)[0])
                instruction = statement.standing or statement.content.startswith(("User's request", "用户要求"))
                # "Whenever you write Python," is half a request: its other half is next
                half = (
                    statement.content.startswith("User's standing request: whenever you")
                    and "," not in statement.content
                )
                if (
                    not piece
                    or not _list_item(piece, instruction=instruction)
                    or asking[nxt]
                    or is_acknowledgement(piece)
                    or (_CONTINUATION_STOP.match(piece) and not (instruction and _NEXT_STEP.match(piece)))
                    or (_analyze(piece_body) is not None and not half)
                    or EN_TEMPORARY.search(piece)
                    or ZH_TEMPORARY.search(piece)
                ):
                    break
                end = n_end
                nxt += 1
            # the longest run-on that still reads as one statement ("I like A, B, and C, a
            # variety of them" keeps "A, B, and C")
            for stop in range(nxt, index + 1, -1):
                extended = _analyze(clean(strip_leads(clean(text[c_start : clauses[stop - 1][1]]))[0]))
                if extended is not None and extended.confidence >= statement.confidence:
                    statement, end = extended, clauses[stop - 1][1]
                    break
            else:
                end = c_end
            if any(q_start <= c_start < q_end for q_start, q_end in quotes):
                index = nxt  # someone else's words, a sign, a title: not the user speaking
                pending_temporary = pending_durable = pending_correction = pending_memory = False
                modifier_start = None
                continue
            span_start = modifier_start if modifier_start is not None else c_start
            span_text = text[span_start:end]
            statement = _label(
                statement,
                span=span_text,
                question=any(asking[index:nxt]),
                temporary=pending_temporary,
                durable=pending_durable,
                correction=pending_correction or correction,
                memory=pending_memory or memory,
            )
            if statement is not None:
                found.append(_Found(statement, span_start, end))
            pending_temporary = pending_durable = pending_correction = pending_memory = False
            modifier_start = None
            index = nxt
    return found


def _label(
    statement: Statement,
    *,
    span: str,
    question: bool,
    temporary: bool,
    durable: bool,
    correction: bool,
    memory: bool,
) -> Statement | None:
    s = replace(statement)
    standing = s.standing or durable or bool(EN_DURABLE.search(span) or ZH_DURABLE.search(span))
    if question:
        # "Could you always answer in English?" is half a preference: a reviewer decides.
        if not standing or s.authority == Authority.TRANSACTIONAL:
            return None
        s.confidence = min(s.confidence, UNSURE)
    # "Always check the return value here": about this code, not about the user
    here = s.scope == Scope.USER and bool(re.search(r"\bhere\b|这里", span, _I))
    if temporary or here or EN_TEMPORARY.search(span) or ZH_TEMPORARY.search(span):
        s.durability = Durability.TEMPORARY
        if s.scope == Scope.USER:
            s.scope = Scope.THREAD
    if EN_HEDGE.search(span) or ZH_HEDGE.search(span):
        s.confidence = min(s.confidence, HEDGED)
    if correction and s.category == Category.PREFERENCE and s.authority == Authority.DESCRIPTIVE:
        s.category = Category.CORRECTION
    if memory and s.confidence >= LIKELY:
        s.confidence = SURE
    if standing and s.content.startswith("User's request:"):
        s.content = "User's standing request:" + s.content.removeprefix("User's request:")
    if standing and s.content.startswith("用户要求："):
        s.content = "用户长期要求：" + s.content.removeprefix("用户要求：")
    if s.authority == Authority.TRANSACTIONAL and not standing:
        s.durability = Durability.TEMPORARY
    return s


@dataclass
class RulesResult:
    arguments: dict[str, Any]  # a MemoryUpdate: {"facts": [...], "summaries": [], "confirmations": []}
    elapsed_ms: float


def _reuse_aliases(key: str, live_keys: set[str]) -> str:
    if key in live_keys:
        return key
    return next((alias for alias in ALIASES.get(key, ()) if alias in live_keys), key)


def extract_facts(rows: Sequence[Row], *, existing_facts: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """The fact candidates (MemoryUpdate's `facts` items) the rules find in the user's rows."""
    live_keys = {str(f.get("key", "")) for f in existing_facts}
    facts: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for row in rows:
        if row.get("role") != "user":
            continue  # an assistant message is never evidence
        text = row.get("content") or ""
        for found in _statements(text)[:MAX_FACTS_PER_MESSAGE]:
            s = found.statement
            key = _reuse_aliases(s.key, live_keys)
            if (key, s.content) in seen:
                continue
            seen.add((key, s.content))
            facts.append(
                {
                    "key": key,
                    "content": s.content[:400],
                    "category": str(s.category),
                    "scope": str(s.scope),
                    "durability": str(s.durability),
                    "authority": str(s.authority),
                    "confidence": s.confidence,
                    "evidence_message_id": row["id"],
                    "evidence_text": text[found.start : found.end],
                }
            )
    return facts


def run(rows: Sequence[Row], *, existing_facts: Sequence[Mapping[str, Any]] = ()) -> RulesResult:
    started = time.perf_counter()
    facts = extract_facts(rows, existing_facts=existing_facts)
    arguments = {"facts": facts, "summaries": [], "confirmations": []}
    return RulesResult(arguments, (time.perf_counter() - started) * 1000)
