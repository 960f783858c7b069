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


def test_it_loads_jieba_once_per_process() -> None:
    tk.tokenize("中文")
    loaded = tk._jieba
    tk.tokenize("再来一次中文")
    assert tk._jieba is loaded is not None


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
