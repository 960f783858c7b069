"""The extraction model behind one thin seam (CONTRIBUTING.md, "How the code should feel").

`extract(rows, profile=…, existing_facts=…)` sends the filtered conversation to any
OpenAI-compatible server through `ChatOpenAI(...).with_structured_output(MemoryUpdate)`
and returns the raw tool-call arguments validated **per candidate**
(`facts.judging.schemas.parse_update`): one bad value never sinks the batch. Anything that is
not a complete answer (HTTP errors after retries, timeouts, truncated or malformed
JSON, no tool call) is an `ExtractionError` — never a silent empty result.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from django.conf import settings
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from facts.enums import HISTORY_SECTIONS, USER_SECTIONS, Authority, Category, Durability, Scope
from facts.intake.filtering import Row
from facts.judging.schemas import MemoryUpdate, Parsed, parse_update
from facts.judging.wording import SINGLE_VALUED

if TYPE_CHECKING:
    # Types only: langchain_core.language_models pulls in langsmith's tracing (~1 s of
    # CPU), which every process importing the URLs (the web server's start, `migrate`'s
    # checks) would pay; the model itself is built lazily in build_model.
    from langchain_core.language_models import BaseChatModel

MAX_EXISTING_FACTS = 200


class ExtractionError(Exception):
    """The model gave no usable answer; the turns stay pending and can be retried.

    `request` is the record of what the model was sent (`request_record`) and `raw`
    what came back, when anything did: the run keeps both, so its page shows why."""

    def __init__(self, message: str, *, request: dict[str, Any] | None = None, raw: Any = None) -> None:
        super().__init__(message)
        self.request: dict[str, Any] = request or {}
        self.raw = raw


EXTRACTORS = ("llm", "rules")


def active_extractor() -> str:
    """`llm` or `rules`: MEMORY_EXTRACTOR when set, else `llm` only if a model server is configured."""
    chosen = (settings.MEMORY_EXTRACTOR or "").strip().lower()
    if chosen:
        if chosen not in EXTRACTORS:
            raise ExtractionError(f"MEMORY_EXTRACTOR={chosen!r}: expected one of {', '.join(EXTRACTORS)}")
        return chosen
    return "llm" if settings.MEMORY_LLM_BASE_URL else "rules"


def extractor_for(model: BaseChatModel | None) -> str:
    """What `extract(…, model=model)` will run: a model handed in is always called."""
    return "llm" if model is not None else active_extractor()


def model_name_for(model: BaseChatModel | None) -> str:
    """The name a run records before it has an answer."""
    if extractor_for(model) == "rules":
        # Lazy, like every import of the extractors here: the rules' patterns take about
        # 0.1 s to compile, langchain_openai and openai seconds to import on a loaded
        # machine, and a process (the API, a worker with the other extractor) loads
        # only the one it runs.
        from facts.judging.rules_extractor.extractor import NAME

        return NAME
    return settings.MEMORY_LLM_MODEL


def describe_extractor() -> str:
    """One line for people (the overview, `doctor`)."""
    try:
        kind = active_extractor()
    except ExtractionError as exc:
        return str(exc)
    if kind == "rules":
        how = "MEMORY_EXTRACTOR=rules" if settings.MEMORY_EXTRACTOR else "no MEMORY_LLM_BASE_URL"
        return f"rules (built-in, no model; {how})"
    where = settings.MEMORY_LLM_BASE_URL or "the OpenAI API"
    return f"llm ({settings.MEMORY_LLM_MODEL} at {where})"


def _values(enum: type[StrEnum]) -> str:
    return " | ".join(member.value for member in enum)


EXTRACTION_RULES = f"""\
You maintain long-term memory about one user for an AI assistant. You receive JSON with
three parts:
- "conversation": the NEW messages of this turn, each with an id and a role.
- "current_profile": the user's stored profile summaries — reference only.
- "existing_facts": facts already stored (id, key, content) — reference only.

Rules:
1. Only the new conversation is evidence. The profile and existing facts are there so you
   can avoid duplicates, reuse keys and notice corrections. Never propose something just
   because it is already stored; being shown a memory is not the user confirming it.
2. Evidence must be the user's own words: evidence_message_id is the id of a message with
   role "user", and evidence_text is copied verbatim from that message. An assistant
   message can give context, never evidence.
3. Returning empty lists is normal and correct when nothing is worth remembering.
4. Prefer what the user states explicitly about their background, lasting preferences
   and long-term goals. Do not guess the user's identity or skills.
5. Label every fact for what it is, even when you think it should not be stored:
   - scope: user (true of the user across tasks) | thread (only this conversation or
     task) | project (a rule or fact of the project/repository they are working in).
     Project rules ("this repo uses PostgreSQL", "we squash commits here") are project.
   - durability: durable | temporary. A one-off request ("answer in English this time",
     "keep it short today") is temporary.
   - authority: descriptive (describes the user or project) | transactional (a grant or
     instruction to act: "you may push", "go ahead and deploy"). A permission stays
     transactional even when the user says it lasts forever.
   - category: {_values(Category)}. Use correction when the user corrects how you should
     work with them (a lasting habit), not for a one-time mistake in the task.
   - confidence: a number from 0 to 1.
6. key names one stable attribute in snake_case (response_language, primary_stack). Reuse
   the key of an existing fact when the user changes or corrects that attribute, so the new
   value replaces the old one. These keys hold one value each and are only for a fact about
   that attribute: {", ".join(SINGLE_VALUED)} (a user who mentions French is not asking for
   answers in French). Anything else gets a key naming its own subject (likes_hiking).
7. content is one self-contained sentence about the user, readable months later on its
   own: name what it is about, never "it", "them", "that place", "这个", "那里"; say only
   what the user's words say (no names, numbers or details they did not give). Keep code,
   versions, operators and links exactly as written.
8. summaries update profile sections: {", ".join(USER_SECTIONS)}
   (history: {", ".join(HISTORY_SECTIONS)}). A summary replaces the section; topOfMind
   holds the user's current long-term focus, not tonight's task. Same scope/authority
   labels and the same evidence rules as facts.
9. confirmations: only when the user explicitly re-confirms an existing fact (name it by
   key or fact_id, with the user's words as evidence). Repetition is not confirmation.

Allowed values: scope {_values(Scope)}; durability {_values(Durability)}; authority
{_values(Authority)}; category {_values(Category)}.
"""


RULES_VERSION = hashlib.sha256(EXTRACTION_RULES.encode()).hexdigest()[:12]


def request_record(
    rows: Sequence[Row], *, profile: Mapping[str, str], existing_facts: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """What a run keeps of the request `build_request` makes: the rules by version, the
    reference material by section name and fact id; the conversation is the run's own
    `filtered_rows`. Never the text of stored facts or summaries: a forgotten
    conversation's facts must not live on in the requests of later runs."""
    return {
        "rules_version": RULES_VERSION,
        "profile_sections": [name for name, text in profile.items() if text],
        "existing_fact_ids": [f["id"] for f in existing_facts[:MAX_EXISTING_FACTS]],
        "messages": len(rows),
    }


@dataclass
class Extraction:
    """What the model answered: the raw arguments and each candidate validated alone."""

    arguments: dict[str, Any]
    parsed: list[Parsed]
    model_name: str
    model_ms: float
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    request: dict[str, Any] = field(default_factory=dict)
    extractor: str = "llm"


def build_model(**overrides: Any) -> BaseChatModel:
    """`ChatOpenAI` configured from settings (any OpenAI-compatible server)."""
    from langchain_openai import ChatOpenAI  # lazy: see model_name_for

    options: dict[str, Any] = {
        "model": settings.MEMORY_LLM_MODEL,
        "api_key": settings.MEMORY_LLM_API_KEY or "not-needed",
        "timeout": settings.MEMORY_LLM_TIMEOUT,
        "max_retries": settings.MEMORY_LLM_MAX_RETRIES,
        "temperature": 0,
        # ChatOpenAI renames max_tokens to max_completion_tokens, which some servers
        # ignore; send the old name explicitly.
        "extra_body": {"max_tokens": settings.MEMORY_LLM_MAX_TOKENS},
    }
    if settings.MEMORY_LLM_BASE_URL:
        options["base_url"] = settings.MEMORY_LLM_BASE_URL
    options.update(overrides)
    return ChatOpenAI(**options)


def build_request(
    rows: Sequence[Row], *, profile: Mapping[str, str], existing_facts: Sequence[Mapping[str, Any]]
) -> list[SystemMessage | HumanMessage]:
    payload = {
        "current_profile": {name: text for name, text in profile.items() if text},
        "existing_facts": [
            {"id": f["id"], "key": f["key"], "content": f["content"]} for f in existing_facts[:MAX_EXISTING_FACTS]
        ],
        "conversation": [dict(row) for row in rows],
    }
    return [SystemMessage(content=EXTRACTION_RULES), HumanMessage(content=json.dumps(payload, ensure_ascii=False))]


def _arguments(message: Any) -> dict[str, Any]:
    """The tool-call arguments (function calling) or the JSON content (json modes)."""
    if not isinstance(message, AIMessage):
        raise ExtractionError("the model returned no message")
    finish = (message.response_metadata or {}).get("finish_reason")
    if message.tool_calls:
        args = message.tool_calls[0].get("args")
        if finish == "length":
            raise ExtractionError("the model's answer was cut off (finish_reason=length); raise MEMORY_LLM_MAX_TOKENS")
        if not isinstance(args, dict):
            raise ExtractionError("the model's tool call has no arguments")
        return args
    if message.invalid_tool_calls:
        error = message.invalid_tool_calls[0].get("error") or "not valid JSON"
        # llama-cpp-python reports a call cut off by max_tokens as finish_reason
        # "tool_calls"; the token count tells.
        used = (message.usage_metadata or {}).get("output_tokens")
        cut = finish == "length" or (used is not None and used >= settings.MEMORY_LLM_MAX_TOKENS)
        hint = f" (cut off at {settings.MEMORY_LLM_MAX_TOKENS} tokens: raise MEMORY_LLM_MAX_TOKENS)" if cut else ""
        raise ExtractionError(f"the model's tool call arguments are malformed{hint}: {str(error)[:200]}")
    if isinstance(message.content, str) and message.content.strip():
        try:
            data = json.loads(message.content)
        except json.JSONDecodeError:
            raise ExtractionError("the model answered with text instead of a tool call") from None
        if isinstance(data, dict):
            return data
    raise ExtractionError("the model returned no tool call")


def _without_max_length(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_max_length(v) for k, v in node.items() if k != "maxLength"}
    if isinstance(node, list):
        return [_without_max_length(v) for v in node]
    return node


def tool_schema() -> dict[str, Any]:
    """MemoryUpdate's JSON schema as the model is shown it, without ``maxLength``.

    Grammar-constrained servers turn a length limit into one nested rule per character:
    llama-cpp-python's server fails to parse the grammar for ``maxLength: 1200``
    ("number of rules … exceeds sane defaults") and its process exits. The lengths
    are still enforced, per candidate, by `parse_update`.

    All three lists are required in what the model is shown (an empty list is still a
    fine answer; validation accepts a missing one): a grammar built from the schema then
    makes the model write ``facts`` first instead of letting a small model pick the
    list with the fewest fields (SmolLM2-135M answered only ``confirmations``).
    """
    schema = _without_max_length(MemoryUpdate.model_json_schema())
    schema["required"] = list(schema["properties"])
    return schema


def extract(
    rows: Sequence[Row],
    *,
    profile: Mapping[str, str] | None = None,
    existing_facts: Sequence[Mapping[str, Any]] = (),
    model: BaseChatModel | None = None,
) -> Extraction:
    """Ask the configured extractor for candidates. Raises `ExtractionError` on any failure.

    With no `model` handed in and `active_extractor()` = rules, the built-in rules run
    (`facts.judging.rules_extractor`); their output goes through the same per-candidate validation.
    """
    if extractor_for(model) == "rules":
        return _extract_with_rules(rows, existing_facts)
    request = build_request(rows, profile=profile or {}, existing_facts=existing_facts)
    sent = request_record(rows, profile=profile or {}, existing_facts=existing_facts)
    try:
        return _call_model(model or build_model(), request, sent)
    except ExtractionError as exc:
        exc.request = exc.request or sent
        raise


def _raw_answer(message: Any) -> dict[str, Any] | None:
    """The parts of an unusable answer a person needs to see why it was refused."""
    if not isinstance(message, AIMessage):
        return None
    return {
        "content": message.content,
        "tool_calls": [dict(call) for call in message.tool_calls],
        "invalid_tool_calls": [dict(call) for call in message.invalid_tool_calls],
        "finish_reason": (message.response_metadata or {}).get("finish_reason"),
    }


def _call_model(chat: BaseChatModel, request: list[SystemMessage | HumanMessage], sent: dict[str, Any]) -> Extraction:
    import openai  # lazy: see model_name_for

    structured = chat.with_structured_output(tool_schema(), method=settings.MEMORY_LLM_METHOD, include_raw=True)
    started = time.perf_counter()
    try:
        # Transport retries with exponential backoff are the openai client's
        # (max_retries): 5xx, 429, timeouts and dropped connections.
        answer = structured.invoke(request)
    except openai.APITimeoutError:
        raise ExtractionError(f"the model did not answer within {settings.MEMORY_LLM_TIMEOUT:g} s") from None
    except openai.APIStatusError as exc:
        raise ExtractionError(f"the model server answered HTTP {exc.status_code}: {str(exc.message)[:200]}") from None
    except openai.APIConnectionError as exc:
        raise ExtractionError(f"could not reach the model server: {exc}") from None
    except openai.OpenAIError as exc:
        raise ExtractionError(f"model call failed: {exc}") from None
    except (ValueError, TypeError, KeyError) as exc:
        # The client could not even build a message from the reply (e.g. arguments
        # that are JSON but not an object).
        raise ExtractionError(f"the model's answer could not be read: {str(exc)[:300]}") from None
    model_ms = (time.perf_counter() - started) * 1000
    raw = answer.get("raw") if isinstance(answer, dict) else None
    try:
        arguments = _arguments(raw)
    except ExtractionError as exc:
        exc.raw = _raw_answer(raw)
        raise
    try:
        parsed = parse_update(arguments)
    except TypeError as exc:
        raise ExtractionError(str(exc), raw=arguments) from None
    usage = getattr(raw, "usage_metadata", None) or {}
    return Extraction(
        arguments=arguments,
        parsed=parsed,
        model_name=str(getattr(chat, "model_name", "") or getattr(chat, "model", "") or ""),
        model_ms=model_ms,
        prompt_tokens=usage.get("input_tokens"),
        completion_tokens=usage.get("output_tokens"),
        request=sent,
    )


def _extract_with_rules(rows: Sequence[Row], existing_facts: Sequence[Mapping[str, Any]]) -> Extraction:
    from facts.judging.rules_extractor import extractor  # lazy: see model_name_for

    result = extractor.run(rows, existing_facts=existing_facts)
    return Extraction(
        arguments=result.arguments,
        parsed=parse_update(result.arguments),
        model_name=extractor.NAME,
        model_ms=result.elapsed_ms,
        extractor="rules",
    )


# --- is the model there? ------------------------------------------------------------

MODEL_SETTINGS = ("MEMORY_LLM_BASE_URL", "MEMORY_LLM_MODEL", "MEMORY_LLM_API_KEY")


@dataclass(frozen=True)
class ModelStatus:
    """What a person needs to know before trusting extraction: `state` is `ok`, `rules`
    (no model configured: the built-in rules extract) or `down` (configured but not usable)."""

    state: str
    message: str
    settings: tuple[str, ...] = MODEL_SETTINGS


def model_status(timeout: float) -> ModelStatus:
    """Ask the configured endpoint for its model list (`GET {base}/models`), waiting at
    most `timeout` seconds: cheap for any OpenAI-compatible server, and it tells an
    unreachable server and a refused key apart from a working one."""
    import httpx  # lazy: see model_name_for (the openai client's own transport)

    try:
        kind = active_extractor()
    except ExtractionError as exc:
        return ModelStatus("down", str(exc))
    if kind == "rules":
        return ModelStatus("rules", f"Extraction runs with the {describe_extractor()}.")
    base = settings.MEMORY_LLM_BASE_URL.rstrip("/")
    if not base:
        return ModelStatus("down", "MEMORY_EXTRACTOR=llm but MEMORY_LLM_BASE_URL is not set: no extraction can run.")
    headers = {"Authorization": f"Bearer {settings.MEMORY_LLM_API_KEY}"} if settings.MEMORY_LLM_API_KEY else {}
    try:
        status = httpx.get(base + "/models", headers=headers, timeout=timeout).status_code
    except httpx.HTTPError as exc:
        return ModelStatus(
            "down", f"The model endpoint {base} does not answer within {timeout:g} s ({exc.__class__.__name__})."
        )
    if status in (401, 403):
        return ModelStatus(
            "down", f"The model endpoint {base} refused the API key (HTTP {status}): check MEMORY_LLM_API_KEY."
        )
    if status >= 500:
        return ModelStatus("down", f"The model endpoint {base} answers HTTP {status}.")
    return ModelStatus("ok", f"{describe_extractor()} answers (HTTP {status}).")
