"""Tokenization shared by documents and queries; token counting with cl100k."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrieval import tokenize as tk
from retrieval.tokens import count_tokens, encoding


def test_it_cuts_chinese_for_search_so_a_word_inside_a_sentence_is_a_token() -> None:
    tokens = tk.tokenize("用户偏好用中文解释技术问题")
    assert "中文" in tokens
    assert "解释" in tokens
    assert tk.query_terms("中文") == ["中文"]


def test_it_lower_cases_latin_words_and_handles_mixed_text() -> None:
    tokens = tk.tokenize("User prefers Python 3.12 和中文解释, NOT Java")
    assert tokens[:4] == ["user", "prefer", "python", "3"]  # English words are stemmed
    assert "中文" in tokens
    assert "not" in tokens and "java" in tokens


def test_it_uses_the_same_tokens_for_documents_and_queries() -> None:
    text = "The user likes 简洁的回答 and short code"
    assert tk.document_terms(text).split() == tk.tokenize(text)


@pytest.mark.parametrize(
    "query",
    ['"', "'", "*", "NEAR(a b)", "(", ")", "a OR b", "AND", "NOT x", "^x", "col:x", "{scope}: x", "x*", '"" ""'],
)
def test_fts_syntax_never_survives_as_a_token(query: str) -> None:
    for term in tk.query_terms(query):
        assert term.isalnum(), term
        assert tk.quote(term) == f'"{term}"'


def test_a_query_of_only_punctuation_has_no_terms() -> None:
    assert tk.query_terms('"" * () :') == []
    assert tk.query_terms("") == []


def test_stop_words_are_dropped_from_queries_unless_nothing_else_is_left() -> None:
    assert tk.query_terms("what does the user prefer for 的 中文") == ["prefer", "中文"]
    assert tk.query_terms("the") == ["the"]


def test_query_terms_are_distinct_and_bounded() -> None:
    assert tk.query_terms("python python Python") == ["python"]
    many = " ".join(f"word{i}" for i in range(200))
    assert len(tk.query_terms(many)) == tk.MAX_QUERY_TERMS


def test_it_loads_the_segmenter_once_per_process() -> None:
    tk.tokenize("中文")
    loaded = tk._rjieba
    tk.tokenize("再来一次中文")
    assert tk._rjieba is loaded is not None


def _python_jieba(run: str) -> list[str]:
    return list(tk.load_jieba().cut_for_search(run))


def _runs() -> list[str]:
    """Han runs of every kind the index meets: dictionary words run together (what
    facts hold), random common characters (unknown words, the HMM's part), and runs with
    characters outside jieba's HMM range (extension A, compatibility, U+9FD6-U+9FFF)."""
    import random

    rng = random.Random(39)
    jieba = tk.load_jieba()
    words = [w for w in list(jieba.dt.FREQ)[:200_000] if tk._FAST_HAN.fullmatch(w)]
    runs = ["用户偏好用中文解释技术问题", "部署在哪个云", "用户的PostgreSQL版本", "乌龙茶", "时区"]
    runs += ["".join(rng.choice(words) for _ in range(rng.randint(1, 10))) for _ in range(3000)]
    runs += ["".join(chr(rng.randint(0x4E00, 0x9FD5)) for _ in range(rng.randint(1, 30))) for _ in range(2000)]
    rare = [(0x3400, 0x4DBF), (0xF900, 0xFAFF), (0x9FD6, 0x9FFF)]
    for _ in range(500):
        chars = [chr(rng.randint(0x4E00, 0x9FD5)) for _ in range(rng.randint(1, 12))]
        low, high = rng.choice(rare)
        chars.insert(rng.randrange(len(chars) + 1), chr(rng.randint(low, high)))
        runs.append("".join(chars))
    return runs


def test_chinese_runs_are_cut_exactly_as_the_python_jieba_cuts_them() -> None:
    # The index's terms are jieba's whichever implementation ran: cached terms, old
    # index rows and new queries all agree (derived.TOKENIZER_ID did not change).
    differ = [run for run in _runs() if tk.cut_for_search(run) != _python_jieba(run)]
    assert differ == []


def test_runs_with_characters_outside_the_hmm_range_go_through_the_python_jieba(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # There the two implementations split unknown characters differently (rjieba not
    # even the same way twice), so the Python package decides.
    seen: list[str] = []

    class Recording:
        @staticmethod
        def cut_for_search(run: str) -> list[str]:
            seen.append(run)
            return _python_jieba(run)

    monkeypatch.setattr(tk, "_rjieba", Recording)
    rare = "㳳襤㳎絼逸蠟"
    assert tk.tokenize(f"用户{rare}喜欢") == _python_jieba(f"用户{rare}喜欢")
    assert tk.tokenize("用户喜欢乌龙茶") == _python_jieba("用户喜欢乌龙茶")
    assert seen == ["用户喜欢乌龙茶"]


def test_it_counts_tokens_with_cl100k() -> None:
    assert count_tokens("hello world") == 2
    assert count_tokens("") == 0
    assert encoding() is encoding()


def test_special_token_text_is_counted_as_plain_text() -> None:
    assert count_tokens("<|endoftext|>") > 1


@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_the_ascii_shortcut_gives_the_same_tokens(text: str) -> None:
    assert tk.tokenize(text) == tk._tokenize_runs(text)


def test_it_stems_english_words_so_inflections_match() -> None:
    assert tk.query_terms("deploy") == tk.query_terms("Deploys") == tk.query_terms("deployment")
    assert tk.query_terms("databases") == tk.query_terms("database")
    assert tk.query_terms("the users") == ["the", "user"], "only stop-words: they are kept, stemmed"
