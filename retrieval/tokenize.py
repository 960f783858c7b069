"""Tokenization shared by the documents in the index and the queries against it.

Chinese runs go through jieba's ``cut_for_search`` (so the query 中文 matches
用户偏好用中文解释技术问题); every other run of letters and digits is one lower-cased
word, reduced to its Snowball English stem (PyStemmer), so "deploy" finds "Deploys"
and "databases" finds "database". Punctuation, quotes and FTS operators never survive
as tokens, which is what makes a query safe to quote into ``MATCH``.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from typing import Any

import Stemmer

# Han ideographs (CJK unified, extension A, compatibility). Kana and Hangul are kept as
# whole runs: jieba only knows Chinese.
HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_RUNS = re.compile(rf"[{HAN}]+|[^\W_{HAN}]+")
_WORD = re.compile(r"[^\W_]+")
_ASCII_WORD = re.compile(r"[a-z0-9]+")

# Words so common in facts that they match a large part of the index ("的", "the",
# "user" matched 26k–40k rows in a comparable system). Queries drop them unless nothing
# else is left; documents keep them, so a query of only such words still works. The
# pieces of English contractions (cat's → cat + s, don't → don + t) are among them: "s"
# matched every "User's …" fact.
STOP_WORDS = frozenset(
    """
    a an and are as at be been but by can could did do does for from had has have how i if in into is it its
    me my no not of on or our please should so than that the their them then there these they this to too
    was we were what when where which who why will with would you your user users user's
    s t d ll m re ve
    的 了 和 与 及 或 是 在 有 也 都 就 而 吗 呢 吧 啊 我 你 他 她 它 我们 你们 他们 这 那 这个 那个
    什么 怎么 如何 哪些 一个 一些 用户 请 把 被 让 给 对 从 到 为 以 之 其 中 上 下 很 还 又 要 会 能 可以
    """.split()
)
_stemmer = threading.local()


def _stem(words: list[str]) -> list[str]:
    # A Stemmer object is not thread-safe: one per thread.
    stemmer = getattr(_stemmer, "english", None)
    if stemmer is None:
        stemmer = _stemmer.english = Stemmer.Stemmer("english")
    return stemmer.stemWords(words)


# Tokens are stems, so the stop-word test is too ("users" and "user's" → "user").
_STOP_STEMS = frozenset(_stem(sorted(STOP_WORDS))) | STOP_WORDS
MAX_QUERY_TERMS = 32
MAX_QUERY_CHARS = 2000

# Segmentation is jieba's, run by `rjieba` (jieba-rs: the same dictionary, DAG and HMM
# in Rust): ~10x less CPU a Chinese card (~60 -> ~7 µs a run) and ~48 MB less memory
# a process than the Python package. The two agree on every run of the characters
# jieba's HMM knows (U+4E00-U+9FD5; tests/test_tokenize.py compares them); on a run with
# any other Han character (extension A, compatibility ideographs, the newest unified
# ones) they split unknown characters differently, so such runs, rare in practice, go
# through the Python package, loaded only when one turns up. The tokens are jieba's
# either way: the terms cache (`derived.TOKENIZER_ID`) stays valid.
_FAST_HAN = re.compile("[\u4e00-\u9fd5]+")

_jieba: Any = None
_jieba_lock = threading.Lock()
_rjieba: Any = None


def load_jieba() -> Any:
    """Import and initialize the Python jieba once per process, without its stderr chatter."""
    global _jieba
    if _jieba is None:
        with _jieba_lock:
            if _jieba is None:
                import jieba

                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                _jieba = jieba
    return _jieba


def _load_rjieba() -> Any:
    global _rjieba
    if _rjieba is None:
        with _jieba_lock:
            if _rjieba is None:
                import rjieba

                rjieba.cut_for_search("加载词典")  # its dictionary loads on the first call
                _rjieba = rjieba
    return _rjieba


def cut_for_search(run: str) -> list[str]:
    """jieba's ``cut_for_search`` of one run of Han characters (the index's words)."""
    if _FAST_HAN.fullmatch(run):
        return _load_rjieba().cut_for_search(run)
    return list(load_jieba().cut_for_search(run))


def cut(run: str) -> list[str]:
    """jieba's ``cut`` of one run of Han characters (a sentence's words, for the
    question frame), through the same choice of segmenter as `cut_for_search`."""
    if _FAST_HAN.fullmatch(run):
        return _load_rjieba().cut(run)
    return load_jieba().lcut(run)


def load_dictionary() -> None:
    """Load the segmenter's dictionary now (before forking the scanning processes)."""
    _load_rjieba()


def tokenize(text: str) -> list[str]:
    """The tokens of `text`, in order, duplicates kept."""
    if not text:
        return []
    if text.isascii():  # the common English case: the same tokens in a third of the time
        return _stem(_ASCII_WORD.findall(text.lower()))
    return _tokenize_runs(text)


def _tokenize_runs(text: str) -> list[str]:
    tokens: list[str] = []
    for match in _RUNS.finditer(text):
        run = match.group()
        if "\u3400" <= run[0] <= "\u9fff" or "\uf900" <= run[0] <= "\ufaff":
            if _FAST_HAN.fullmatch(run):
                # Pieces of a run of Han characters: word characters, every one.
                tokens.extend(_load_rjieba().cut_for_search(run))
                continue
            for word in load_jieba().cut_for_search(run):
                # jieba can hand back punctuation or mixed pieces; keep word characters only.
                tokens.extend(_WORD.findall(word))
        else:
            tokens.extend(_stem([run.lower()]))
    return tokens


def document_terms(text: str) -> str:
    """What the index stores for a card's content: its tokens joined by spaces."""
    return " ".join(tokenize(text))


def query_terms(text: str) -> list[str]:
    """Distinct query tokens, stop-words dropped unless they are all there is."""
    tokens = _distinct(tokenize(text[:MAX_QUERY_CHARS]))
    useful = [t for t in tokens if t not in _STOP_STEMS]
    return (useful or tokens)[:MAX_QUERY_TERMS]


def quote(term: str) -> str:
    """An FTS5 string literal: nothing inside it is an operator."""
    return '"' + term.replace('"', '""') + '"'


def match_any(terms: Iterable[str]) -> str:
    return " OR ".join(quote(t) for t in terms)


def _distinct(tokens: list[str]) -> list[str]:
    return list(dict.fromkeys(tokens))
