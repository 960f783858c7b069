"""The extraction model of the worker-kill test: an OpenAI-protocol server (the suite's
`tests/openai_stub.py`) that answers every ``Note TAG: I keep my notes in folder TAG.``
user message with the fact ``notes_folder_TAG``, a little slowly, and counts its calls.

    python slow_model_stub.py CALLS_FILE DELAY   → prints its base URL, serves until
                                                   stdin closes, then prints {"requests": N}

Each request is counted in CALLS_FILE (its number, rewritten) *before* the answer is
delayed by DELAY seconds, so a test that waits for call N and kills the worker kills it
while call N is in flight, with its turn claimed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.helpers_reliability.model_stub import answer
from tests.openai_stub import OpenAIStub, Reply, _completion


class SlowStub(OpenAIStub):
    calls_file: Path = Path("/dev/null")
    delay: float = 0.0

    def next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append({})
            self.calls_file.write_text(str(len(self.requests)))
        # Only the facts: the confirmation and profile of the web test are not wanted here.
        arguments = json.dumps({"facts": answer(body)["facts"], "summaries": [], "confirmations": []})
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "MemoryUpdate", "arguments": arguments}}
            ],
        }
        return Reply(body=_completion(message, "tool_calls", (120, 40)), delay=self.delay)


def main() -> None:
    stub = SlowStub()
    stub.calls_file, stub.delay = Path(sys.argv[1]), float(sys.argv[2])
    stub.start()
    print(stub.url, flush=True)
    sys.stdin.read()  # until the test closes our stdin
    stub.stop()
    print(json.dumps({"requests": len(stub.requests)}), flush=True)


if __name__ == "__main__":
    main()
