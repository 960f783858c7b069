"""A search embeds its query through `retrieval.query_encoder`'s one-text path: the
package's vectors, cheaper (issue 19's latency target)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest

from retrieval import embedding, query_encoder

TEXTS = [
    "which database does the billing service use",
    "用户在哪个时区",
    "用户的 PostgreSQL 版本",
    "SQL",
    "x",
    "",
    "   ",
    "?!…",
    "😀 emoji 🚀 and 数据库",
    "Deploys the service with blue-green switches on Kubernetes; logs go to Grafana Loki. " * 20,
]


def _package_vectors(texts: list[str]) -> np.ndarray:
    out = np.asarray(embedding.model().encode(texts), dtype=np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_it_gives_the_packages_vectors(embeddings: None) -> None:
    single = query_encoder.for_model(embedding.model())
    assert single is not None
    for text, expected in zip(TEXTS, _package_vectors(TEXTS), strict=True):
        got = single.encode(text)
        assert got.dtype == np.float32 and got.shape == (embedding.DIM,)
        assert float(np.max(np.abs(got - expected))) <= query_encoder.TOLERANCE, text[:40]


def test_a_search_embeds_its_query_on_the_one_text_path(embeddings: None, monkeypatch: pytest.MonkeyPatch) -> None:
    assert embedding.query_path() == "single"
    seen: list[str] = []
    real = query_encoder.QueryEncoder.encode

    def counting(self: query_encoder.QueryEncoder, text: str) -> np.ndarray:
        seen.append(text)
        return real(self, text)

    monkeypatch.setattr(query_encoder.QueryEncoder, "encode", counting)
    embedding._query_vector.cache_clear()
    vec = embedding.query_vector("时区 and logs")
    assert seen == ["时区 and logs"]
    assert float(np.max(np.abs(vec - _package_vectors(["时区 and logs"])[0]))) <= query_encoder.TOLERANCE
    embedding._query_vector.cache_clear()


class _Changed:
    """A package whose internals moved: same `encode`, no `_model`."""

    def __init__(self, real: Any) -> None:
        self.encode = real.encode


def test_a_changed_package_falls_back_to_its_own_encode(embeddings: None, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="retrieval.query_encoder"):
        assert query_encoder.for_model(_Changed(embedding.model())) is None
    assert "batch path" in caplog.text


def test_a_one_text_path_whose_vectors_differ_is_not_used(
    embeddings: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = query_encoder.QueryEncoder.encode
    monkeypatch.setattr(query_encoder.QueryEncoder, "encode", lambda self, text: real(self, text + " drift"))
    with caplog.at_level(logging.WARNING, logger="retrieval.query_encoder"):
        assert query_encoder.for_model(embedding.model()) is None
    assert "differ from the package's" in caplog.text


def test_without_the_one_text_path_queries_still_embed(embeddings: None, monkeypatch: pytest.MonkeyPatch) -> None:
    embedding.model()
    monkeypatch.setattr(embedding, "_one_text", lambda: None)
    embedding._query_vector.cache_clear()
    assert embedding.query_path() == "batch"
    vec = embedding.query_vector("用户在哪个时区")
    assert float(np.max(np.abs(vec - _package_vectors(["用户在哪个时区"])[0]))) <= 1e-6
    embedding._query_vector.cache_clear()
