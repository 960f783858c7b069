"""Loading what the first write or read would otherwise wait for, once per process: at
start-up, and before forking workers, which then share it.

Every card write needs the segmenter's dictionary (jieba, `retrieval.tokenize`) and the
token counter (`retrieval.tokens`): a process that did not load them makes its first
write wait ~0.5 s. With hybrid search on, the embedding model too (`retrieval.embedding`).
"""

from __future__ import annotations

from . import embedding, tokens
from .tokenize import load_dictionary


def warm(*, queries: bool = False) -> None:
    """Load the dictionary, the token counter and, when hybrid search is on, the
    embedding model now. `queries`: the process serves searches too (`embedding.warm`)."""
    load_dictionary()
    tokens.encoding()
    embedding.warm(queries=queries)
