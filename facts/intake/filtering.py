"""Which messages of a turn may be shown to the extraction model (docs/design.md §5.1).

Kept: the user's own words and assistant text replies. Dropped: tool traffic, system
messages, anything the runtime injected (memory, uploads, runtime notes), hidden
messages (except a real user's clarification answer), and greeting-only or upload-only
user messages together with the assistant reply that follows them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, convert_to_messages, messages_from_dict
from pydantic import ValidationError

from facts.intake.sanitize import InvalidMessage


class Row(TypedDict):
    id: str
    role: str  # "user" | "assistant"
    content: str


# Sources the runtime adds to a conversation; never the user's new words.
INJECTED_ORIGINS = frozenset({"memory", "runtime", "upload"})
# A hidden message carrying this marker is a real user's answer to a clarification.
CLARIFICATION_MARKERS = ("human_input_response", "clarification_response")

_UPLOAD_BLOCKS = re.compile(
    r"<(current_uploads|uploaded_files)\b[^>]*>.*?</\1\s*>",
    re.IGNORECASE | re.DOTALL,
)
# An unclosed upload block (a truncated turn) swallows the rest of the message.
_UNCLOSED_UPLOAD = re.compile(r"<(?:current_uploads|uploaded_files)\b[^>]*>.*\Z", re.IGNORECASE | re.DOTALL)

# Messages made only of these (any number, any order, separated by spaces or
# punctuation) carry nothing worth remembering. Extend the list, not the regex.
ACKNOWLEDGEMENTS: tuple[str, ...] = (
    # Chinese
    "你好", "您好", "嗨", "哈喽", "早上好", "下午好", "晚上好", "早", "晚安",
    "好的", "好滴", "好嘞", "好", "嗯", "嗯嗯", "哦", "噢", "喔", "行", "可以", "没问题",
    "谢谢", "谢谢你", "谢谢您", "多谢", "感谢", "辛苦了", "收到", "明白", "明白了", "了解",
    "知道了", "懂了", "对", "是的", "哈哈", "哈哈哈", "棒", "太好了", "不客气", "再见", "拜拜",
    # English
    "hi", "hello", "hey", "good morning", "good afternoon", "good evening", "good night",
    "ok", "okay", "k", "kk", "sure", "yes", "yep", "yeah", "alright", "all right", "fine",
    "thanks", "thank you", "thanks a lot", "thank you very much", "thx", "ty", "cheers",
    "got it", "understood", "noted", "cool", "great", "nice", "perfect", "awesome",
    "bye", "goodbye", "see you", "lol", "👍", "🙏", "😊",
)  # fmt: skip
_PUNCTUATION = " \t\r\n\u3000。．.!！?？,，、;；:：~～…·-—'\"“”‘’()（）"
_PUNCT_CLASS = "[" + re.escape(_PUNCTUATION) + "]"


def _acknowledgement_pattern(words: Iterable[str]) -> re.Pattern[str]:
    # Longest first so "thank you" wins over "thank" style prefixes.
    alternatives = "|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True))
    return re.compile(rf"(?:(?:{alternatives}){_PUNCT_CLASS}*)+", re.IGNORECASE)


_ACK = _acknowledgement_pattern(ACKNOWLEDGEMENTS)


def is_acknowledgement(text: str) -> bool:
    """True when the whole text is greetings/thanks/acknowledgements — never a keyword hit."""
    stripped = text.strip(_PUNCTUATION)
    return bool(stripped) and _ACK.fullmatch(stripped) is not None


def cut_uploads(text: str) -> tuple[str, bool]:
    """Remove upload blocks; return the remaining text and whether any were found."""
    cut = _UPLOAD_BLOCKS.sub("", text)
    cut = _UNCLOSED_UPLOAD.sub("", cut)
    return cut.strip(), cut != text


def text_of(content: Any) -> str:
    """The text of a message: a string, or the text parts of multimodal list content."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(p for p in parts if p.strip())
    return ""


def _is_injected(message: BaseMessage) -> bool:
    meta = message.additional_kwargs or {}
    return meta.get("origin") in INJECTED_ORIGINS


def _is_clarification(message: BaseMessage) -> bool:
    meta = message.additional_kwargs or {}
    return isinstance(message, HumanMessage) and any(meta.get(marker) for marker in CLARIFICATION_MARKERS)


def _is_hidden(message: BaseMessage) -> bool:
    meta = message.additional_kwargs or {}
    return bool(meta.get("hide_from_ui")) and not _is_clarification(message)


def _has_tool_calls(message: AIMessage) -> bool:
    meta = message.additional_kwargs or {}
    return bool(message.tool_calls or message.invalid_tool_calls or meta.get("tool_calls") or meta.get("function_call"))


def filter_messages(messages: Sequence[BaseMessage | Mapping[str, Any]]) -> list[Row]:
    """The rows worth showing to the extraction model, in order.

    A message without an id gets a positional one (``msg-3``) so a candidate can still
    name it as evidence; ingestion assigns stable ids before it gets here.
    """
    rows: list[Row] = []
    skip_reply = False
    for index, message in enumerate(to_messages(messages)):
        if _is_injected(message) or _is_hidden(message):
            continue
        message_id = message.id or f"msg-{index}"
        if isinstance(message, HumanMessage):
            text, _ = cut_uploads(text_of(message.content))
            skip_reply = not text or is_acknowledgement(text)
            if not skip_reply:
                rows.append(Row(id=message_id, role="user", content=text))
        elif isinstance(message, AIMessage):
            if _has_tool_calls(message) or skip_reply:
                continue
            text = text_of(message.content).strip()
            if text:
                rows.append(Row(id=message_id, role="assistant", content=text))
        # System, tool and function messages fall through: never evidence of the user.
    return rows


def has_user_text(rows: Iterable[Row]) -> bool:
    return any(row["role"] == "user" for row in rows)


def to_message(raw: BaseMessage | Mapping[str, Any]) -> BaseMessage:
    """One message from a LangChain object, a LangChain dict or an OpenAI-style dict.

    Uses langchain-core's own converters; unknown keys of an OpenAI-style dict (origin,
    hide_from_ui, …) end up in ``additional_kwargs``. Raises ValueError on garbage.
    """
    if isinstance(raw, BaseMessage):
        return raw
    if not isinstance(raw, Mapping):
        raise ValueError("a message must be an object")
    data = dict(raw)
    try:
        if "data" in data and "type" in data and isinstance(data["data"], Mapping):
            return messages_from_dict([data])[0]  # message_to_dict() shape
        if "role" not in data and "type" not in data:
            raise ValueError("a message needs a 'role' (or 'type')")
        data.setdefault("content", "")
        return convert_to_messages([data])[0]
    except ValidationError as exc:  # before ValueError, which it is: keep where the problem is
        raise InvalidMessage(exc.errors()) from None
    except ValueError:
        raise
    except Exception as exc:  # the converters' KeyError/TypeError, an unknown role
        raise ValueError(str(exc)) from None


def to_messages(raw: Iterable[BaseMessage | Mapping[str, Any]]) -> list[BaseMessage]:
    return [to_message(item) for item in raw]
