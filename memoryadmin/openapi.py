"""OpenAPI 3.1 description of the agents' API, served at /api/v1/openapi.json.

Kept next to the views by hand (there are four endpoints); tests check that every
route here exists, that every API route is described, and that the examples validate
against the schemas and are accepted by the real endpoints.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

PREFIX = "/api/v1"


def _error_response(description: str, code: str, message: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {
            "application/json": {
                "schema": {"$ref": "#/components/schemas/Error"},
                "example": {"error": {"code": code, "message": message}},
            }
        },
    }


_ERRORS = {
    "400": _error_response(
        "Malformed JSON, or a field that is missing or invalid: one short line per problem, each naming "
        "its place (`messages[2].content[0]: …`). Strict JSON: NaN and ±Infinity are refused wherever they "
        "are (`messages[0].additional_kwargs.score: NaN is not a JSON number; …`); so are ids with control "
        "characters. Control characters in message text are removed, not refused. A `created_at` (the turn's "
        "or a message's) without its offset, unparsable, before 1970 or more than 5 minutes ahead of the "
        "server's clock is refused (`created_at: 2999-01-01T00:00:00Z is in the future (…)`).",
        "invalid_field",
        "messages[2].content[0]: Input should be a valid string or a valid dictionary",
    ),
    "401": _error_response("No API key, an unknown key, or a revoked key", "invalid_key", "unknown API key"),
    "403": _error_response(
        "The key may not act for this agent (`agent_not_allowed`) or this user (`user_not_allowed`: the "
        "key is limited to user-id patterns such as `acme:*`), or the project belongs to another tenant than "
        "the user's (`project_not_allowed`: a user reads and writes only its own tenant's projects and the "
        "shared ones)",
        "user_not_allowed",
        "this key may not act for the user 'globex:carol'",
    ),
    "405": _error_response("Wrong method", "method_not_allowed", "use POST for this endpoint"),
    "429": _error_response(
        "The key made more requests this minute than its rate limit allows (`rate_limited`), or this client "
        "address sent more failed keys than API_AUTH_FAILURE_LIMIT within the window (`too_many_failures`; "
        "a valid key still passes). See Retry-After.",
        "rate_limited",
        "this key may make 6000 requests a minute",
    ),
}


_READ_ERRORS = {
    "404": _error_response(
        "No agent of this name is known: it has sent no turn and has no card or settings, and no key is "
        "limited to it. A new agent becomes known with its first turn (clients read this as no memory yet)",
        "unknown_agent",
        "agent_name: no agent 'codr' is known (it has sent no turn and has no memory or settings); check the "
        "name. A new agent becomes known with its first turn.",
    ),
    "503": _error_response(
        "The search index is missing, corrupt or outdated and is being rebuilt from the files (never an "
        "empty answer meanwhile): retry after Retry-After seconds, or answer without memory",
        "index_unavailable",
        "the search index is missing: it is being rebuilt from the files; retry in a few seconds",
    ),
}


def _errors(*statuses: str) -> dict[str, Any]:
    return {status: _ERRORS[status] for status in statuses}


TURN_EXAMPLE: dict[str, Any] = {
    "user_id": "alice",
    "agent_name": "coder",
    "thread_id": "thread-42",
    "project_id": None,
    "messages": [
        {"id": "m1", "role": "user", "content": "我主要做 Python 后端开发，平时请用中文解释技术问题。"},
        {"id": "m2", "role": "assistant", "content": "好的，之后我会用中文解释。"},
    ],
}

# A backfill: an old conversation, dated when it was said (each message may say its own).
BACKFILL_EXAMPLE: dict[str, Any] = {
    "user_id": "alice",
    "agent_name": "coder",
    "thread_id": "imported-2023-03-14",
    "created_at": "2023-03-14T09:26:53+01:00",
    "messages": [
        {"id": "m1", "role": "user", "content": "I mostly write Rust these days, please answer in English."},
        {
            "id": "m2",
            "role": "assistant",
            "content": "Understood: English it is.",
            "created_at": "2023-03-14T09:27:10+01:00",
        },
    ],
}

_SAID_AT_HELP = (
    "When it was said: ISO 8601 with its offset (`2024-05-01T09:30:00+02:00` or `…Z`), stored in UTC to the "
    "second. A fact taken from a message is dated by it (its own time, else the turn's; neither: when it is "
    "extracted), and search's decay counts from it. Old times are fine (backfills, from 1970); naive, "
    "unparsable or more than 5 minutes ahead of the server's clock: 400."
)

_SCOPE_PARAMS = [
    {"name": "user_id", "in": "query", "required": True, "schema": {"$ref": "#/components/schemas/Id"}},
    {
        "name": "agent_name",
        "in": "query",
        "required": True,
        "description": "Lower-case [a-z0-9-]; `__default__` reads the turns sent without an agent_name. "
        "Required: a forgotten one is a 400, and an agent nothing knows (no turn, card or settings, and "
        "no key limited to it) a 404 `unknown_agent`, not an empty memory",
        "schema": {"$ref": "#/components/schemas/AgentName"},
    },
    {
        "name": "project_id",
        "in": "query",
        "required": False,
        "description": "Load this project's memory too (and only this project's): a project of the user's "
        "own tenant, or a shared one (else 403 project_not_allowed)",
        "schema": {"$ref": "#/components/schemas/Id"},
    },
]


def _turn_operation(summary: str, description: str, operation_id: str) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "summary": summary,
        "description": description,
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"$ref": "#/components/schemas/TurnRequest"},
                    "examples": {
                        "turn": {"summary": "A finished turn, said now", "value": TURN_EXAMPLE},
                        "backfill": {
                            "summary": "An old conversation, dated when it was said",
                            "value": BACKFILL_EXAMPLE,
                        },
                    },
                }
            },
        },
        "responses": {
            "202": {
                "description": "Stored; messages already seen in this thread are not counted again",
                "content": {
                    "application/json": {
                        "schema": {"$ref": "#/components/schemas/TurnReceipt"},
                        "example": {"accepted": 2, "turn_ids": [17]},
                    }
                },
            },
            **_errors("400", "401", "403", "405"),
            "409": _error_response(
                "The user (or this thread) is being erased: the turn is refused, not stored",
                "erasure_in_progress",
                "an erasure of user 'alice' is in progress; nothing of this user is accepted until it ends",
            ),
            "413": _error_response(
                "The body is larger than API_MAX_BODY_BYTES (a `Transfer-Encoding: chunked` body is counted "
                "while it is read)",
                "too_large",
                "the body is larger than 1048576 bytes",
            ),
            "429": _ERRORS["429"],
        },
    }


def spec() -> dict[str, Any]:
    max_id = int(settings.API_MAX_ID_CHARS)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Long-term memory for agents",
            "version": "1.0.0",
            "description": (
                "Agents post finished turns (extracted later, in the worker), flush messages before "
                "summarization deletes them, and read their memory back as a budgeted context block or "
                "through search. Authenticate with `Authorization: Bearer <key>`; keys are issued in the "
                "dashboard or with `manage.py create_api_key`; a key can be limited to some agents and to "
                "some users (patterns like `acme:*`), and every endpoint answers 403 outside them."
            ),
        },
        "servers": [{"url": PREFIX}],
        "security": [{"bearer": []}],
        "paths": {
            "/turns": {
                "post": _turn_operation(
                    "Record a finished turn",
                    "The turn is stored before the answer; extraction runs in the worker after the debounce "
                    "window, merged with later turns of the same thread.",
                    "postTurn",
                )
            },
            "/flush": {
                "post": _turn_operation(
                    "Flush messages about to be summarized",
                    "Same body as /turns, processed without debounce. Message ids already extracted are "
                    "skipped, so flushing and the normal path never extract a message twice.",
                    "flushTurn",
                )
            },
            "/context": {
                "get": {
                    "operationId": "getContext",
                    "summary": "The memory block to inject into the next model call",
                    "description": "Rendered at every call within the agent's budgets; `tool` mode renders the "
                    "profile only (facts come from /search).",
                    "parameters": [
                        *_SCOPE_PARAMS,
                        {
                            "name": "mode",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string", "enum": ["auto", "tool"], "default": "auto"},
                        },
                    ],
                    "responses": {
                        "200": {
                            "description": "The rendered context",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/Context"},
                                    "example": {
                                        "text": "<memory>…</memory>",
                                        "tokens": 89,
                                        "included": ["fact_0123456789ab"],
                                        "excluded": [{"id": "fact_ba9876543210", "reason": "budget"}],
                                    },
                                }
                            },
                        },
                        **_errors("400", "401", "403", "405", "429"),
                        **_READ_ERRORS,
                    },
                }
            },
            "/search": {
                "get": {
                    "operationId": "search",
                    "summary": "Search the caller's fact cards (what the memory_search tool returns)",
                    "parameters": [
                        *_SCOPE_PARAMS,
                        {
                            "name": "q",
                            "in": "query",
                            "required": True,
                            "schema": {"type": "string", "minLength": 1, "maxLength": 2000},
                        },
                        {
                            "name": "limit",
                            "in": "query",
                            "required": False,
                            "description": "Clamped to 1..10",
                            "schema": {"type": "integer", "default": 5},
                        },
                    ],
                    "responses": {
                        "200": {
                            "description": "Best first, trimmed to the search token cap",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/SearchResults"},
                                    "example": {
                                        "results": [
                                            {
                                                "id": "fact_0123456789ab",
                                                "content": "用户偏好用中文解释技术问题。",
                                                "category": "preference",
                                                "confidence": 0.9,
                                                "score": 1.02,
                                            }
                                        ]
                                    },
                                }
                            },
                        },
                        **_errors("400", "401", "403", "405", "429"),
                        **_READ_ERRORS,
                    },
                }
            },
            "/health": {
                "get": {
                    "operationId": "health",
                    "summary": "Whether memory can be served now (for load balancers; no key)",
                    "security": [],
                    "responses": {
                        "200": {
                            "description": "The database answers and the search index is ready",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/Health"},
                                    "example": {
                                        "status": "ok",
                                        "database": "ok",
                                        "index": {"state": "ready", "cards": 1234},
                                    },
                                }
                            },
                        },
                        "503": {
                            "description": "Memory cannot be served: the index is being rebuilt (or the "
                            "database does not answer)",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/Health"},
                                    "example": {
                                        "status": "unavailable",
                                        "database": "ok",
                                        "index": {
                                            "state": "missing",
                                            "rebuilding": True,
                                            "message": "the search index is missing: it is being rebuilt from "
                                            "the files; retry in a few seconds",
                                        },
                                    },
                                }
                            },
                        },
                    },
                }
            },
            "/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This description",
                    "security": [],
                    "responses": {"200": {"description": "OpenAPI 3.1 document"}},
                }
            },
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Id": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": max_id,
                    "pattern": "^[^/\\\\\\x00-\\x1f\\x7f-\\x9f]+$",
                    "description": "Any text without '/', '\\\\' or control characters; stored hashed on disk",
                },
                "AgentName": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,63}$"},
                "SaidAt": {"type": "string", "format": "date-time", "description": _SAID_AT_HELP},
                "Message": {
                    "type": "object",
                    "required": ["role"],
                    "properties": {
                        "id": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": 200,
                            "pattern": "^[^\\x00-\\x1f\\x7f-\\x9f]+$",
                            "description": "Send it: ids are how a message is never extracted twice "
                            "(without one, an id is derived from the content); no control characters",
                        },
                        "role": {
                            "type": "string",
                            "enum": ["user", "assistant", "system", "developer", "tool", "function", "human", "ai"],
                        },
                        "content": {
                            "oneOf": [
                                {"type": "string"},
                                {"type": "array", "items": {"oneOf": [{"type": "string"}, {"type": "object"}]}},
                            ],
                            "description": "Control characters other than tab, line feed and carriage return "
                            "are removed from every string of a message before it is stored",
                        },
                        "created_at": {"$ref": "#/components/schemas/SaidAt"},
                        "additional_kwargs": {
                            "type": "object",
                            "description": "origin=memory|runtime|upload and hide_from_ui mark messages "
                            "that are never evidence of the user; created_at here is the message's time "
                            "too (LangChain keeps a role dict's created_at there)",
                        },
                        "tool_calls": {"type": "array", "items": {"type": "object"}},
                        "tool_call_id": {"type": "string"},
                        "name": {"type": "string"},
                    },
                },
                "TurnRequest": {
                    "type": "object",
                    "required": ["user_id", "thread_id", "messages"],
                    "properties": {
                        "user_id": {"$ref": "#/components/schemas/Id"},
                        "agent_name": {"oneOf": [{"$ref": "#/components/schemas/AgentName"}, {"type": "null"}]},
                        "thread_id": {"$ref": "#/components/schemas/Id"},
                        "project_id": {"oneOf": [{"$ref": "#/components/schemas/Id"}, {"type": "null"}]},
                        "created_at": {"oneOf": [{"$ref": "#/components/schemas/SaidAt"}, {"type": "null"}]},
                        "messages": {
                            "type": "array",
                            "minItems": 1,
                            "maxItems": int(settings.API_MAX_MESSAGES),
                            "items": {"$ref": "#/components/schemas/Message"},
                        },
                    },
                },
                "TurnReceipt": {
                    "type": "object",
                    "required": ["accepted", "turn_ids"],
                    "properties": {
                        "accepted": {"type": "integer", "minimum": 0, "description": "New messages stored"},
                        "turn_ids": {"type": "array", "items": {"type": "integer"}},
                    },
                },
                "Context": {
                    "type": "object",
                    "required": ["text", "tokens", "included", "excluded"],
                    "properties": {
                        "text": {"type": "string"},
                        "tokens": {"type": "integer", "minimum": 0},
                        "included": {"type": "array", "items": {"type": "string"}},
                        "excluded": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["id", "reason"],
                                "properties": {
                                    "id": {"type": "string"},
                                    "reason": {
                                        "type": "string",
                                        "enum": ["budget", "correction_budget", "top_n", "expired"],
                                    },
                                },
                            },
                        },
                    },
                },
                "SearchResults": {
                    "type": "object",
                    "required": ["results"],
                    "properties": {
                        "results": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["id", "content"],
                                "properties": {
                                    "id": {"type": "string"},
                                    "content": {"type": "string"},
                                    "category": {"type": "string"},
                                    "confidence": {"type": "number"},
                                    "score": {"type": "number"},
                                    "truncated": {
                                        "type": "boolean",
                                        "description": "present (true) when the content was cut, ending in …, "
                                        "to keep the answer within the token cap",
                                    },
                                },
                            },
                        }
                    },
                },
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {
                        "error": {
                            "type": "object",
                            "required": ["code", "message"],
                            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                        }
                    },
                },
                "Health": {
                    "type": "object",
                    "required": ["status", "database", "index"],
                    "properties": {
                        "status": {"type": "string", "enum": ["ok", "unavailable"]},
                        "database": {"type": "string", "description": "ok, or the error"},
                        "index": {
                            "type": "object",
                            "required": ["state"],
                            "properties": {
                                "state": {"type": "string", "enum": ["ready", "missing", "corrupt", "outdated"]},
                                "cards": {"type": "integer", "minimum": 0},
                                "rebuilding": {"type": "boolean"},
                                "message": {"type": "string"},
                                "last_error": {"type": "string"},
                            },
                        },
                    },
                },
            },
        },
    }
