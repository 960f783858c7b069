"""Example counts for the property and fuzz tests: `make soak` multiplies them
(FUZZ_SCALE=10) without touching the tests."""

from __future__ import annotations

import os


def examples(n: int) -> int:
    return n * max(1, int(os.environ.get("FUZZ_SCALE", "1")))
