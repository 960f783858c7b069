"""A local HTTP server that speaks just enough of the OpenAI chat-completions protocol.

Tests point the real `ChatOpenAI` client at it (``base_url=stub.url``) and script what
the "model" answers, one reply per request, in order::

    stub.reply_tool_call({"facts": [...]})        # a function call with these arguments
    stub.reply_tool_call('{"facts": [', finish_reason="length")   # truncated JSON
    stub.reply_text("I think the user likes Python")              # no tool call at all
    stub.reply_error(500)                                         # HTTP error
    stub.reply_tool_call({...}, delay=2.0)                        # slow response

When the script runs out, the last reply is repeated. Every request body is kept in
``stub.requests`` (decoded JSON) so tests can check what the client sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: dict[str, Any] | None = None
    delay: float = 0.0


@dataclass
class OpenAIStub:
    host: str = "127.0.0.1"
    script: list[Reply] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    _last: Reply | None = None
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # --- scripting -------------------------------------------------------------
    def reply_tool_call(
        self,
        arguments: dict[str, Any] | str,
        *,
        name: str = "MemoryUpdate",
        finish_reason: str = "tool_calls",
        delay: float = 0.0,
        usage: tuple[int, int] = (120, 40),
    ) -> None:
        args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}],
        }
        self.script.append(Reply(body=_completion(message, finish_reason, usage), delay=delay))

    def reply_text(self, text: str, *, delay: float = 0.0) -> None:
        message = {"role": "assistant", "content": text}
        self.script.append(Reply(body=_completion(message, "stop", (50, 10)), delay=delay))

    def reply_error(self, status: int = 500, message: str = "upstream exploded") -> None:
        self.script.append(Reply(status=status, body={"error": {"message": message, "type": "server_error"}}))

    def reply_raw(self, status: int, body: dict[str, Any], *, delay: float = 0.0) -> None:
        self.script.append(Reply(status=status, body=body, delay=delay))

    # --- serving ---------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://{self.host}:{self._server.server_address[1]}/v1"

    def next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(body)
            if self.script:
                self._last = self.script.pop(0)
            if self._last is None:
                return Reply(status=500, body={"error": {"message": "stub has no scripted reply"}})
            return self._last

    def start(self) -> OpenAIStub:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    body = {"_unparseable": raw.decode("utf-8", "replace")}
                reply = stub.next_reply(body)
                if reply.delay:
                    time.sleep(reply.delay)
                data = json.dumps(reply.body or {}).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def do_GET(self) -> None:
                # `GET /models`: what a status check asks (facts.judging.extraction.model_status).
                found = self.path.rstrip("/").endswith("/models")
                data = json.dumps(
                    {"object": "list", "data": [{"id": "stub-model", "object": "model"}]} if found else {}
                )
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data.encode())

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _completion(message: dict[str, Any], finish_reason: str, usage: tuple[int, int]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "stub-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }


def running_stub() -> Iterator[OpenAIStub]:
    """Generator for a pytest fixture: ``yield from running_stub()``."""
    stub = OpenAIStub().start()
    try:
        yield stub
    finally:
        stub.stop()
