"""The gate's rules on a fact's own words (issue 35): self-contained, grounded, keys.

They apply to every extractor: the model's candidates below are what a real model wrote
or could write; the rules' own candidates are checked in test_extract_rules.py.
"""

from __future__ import annotations

import pytest

from facts.intake.filtering import Row
from facts.judging import gate, wording
from tests.factories import fact_model


def judge(content: str, said: str, *, key: str = "pref_x", project_id: str | None = None) -> list[str]:
    rows: list[Row] = [{"id": "u1", "role": "user", "content": said}]
    candidate = fact_model(key=key, content=content, evidence_message_id="u1", evidence_text=said)
    return gate.judge_fact(candidate, rows, project_id=project_id, threshold=0.7)


# --- self-contained ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("User loves them.", "I love them!"),
        ("User loves how uncomplicated it is.", "I love how uncomplicated it is."),
        ("User loves escaping to that world.", "I love escaping to that world."),
        ("User thinks this is the best approach.", "I think this is the best approach."),
        ("User often goes there on weekends.", "I often go there on weekends."),
        ("User says she is a great teacher.", "She is a great teacher, I think."),
        ("用户很喜欢这种气质", "我很喜欢这种气质。"),
        ("用户最喜欢那首歌", "我最喜欢那首歌"),
        ("用户觉得它很好用", "我觉得它很好用"),
    ],
)
def test_it_rejects_a_fact_that_points_at_something_only_the_conversation_held(content: str, said: str) -> None:
    assert gate.DANGLING_REFERENCE in judge(content, said)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("User has two cats and feeds them at 7 am.", "I have two cats and feed them at 7 am."),
        (
            "User's sister lives in Oslo and her kids are learning Norwegian.",
            "My sister lives in Oslo, her kids are learning Norwegian",
        ),
        ("User finds it hard to wake up early.", "I find it hard to wake up early."),
        ("User likes it when answers start with an example.", "I like it when answers start with an example"),
        ("User likes movies that make them laugh.", "I like movies that make me laugh"),
        ("User wants to be called Jack.", "You can call me Jack."),
        ("用户喜欢弹吉他", "我喜欢弹吉他"),
        ("用户喜欢 Python 及其生态", "我喜欢 Python 及其生态"),
        ("用户的妹妹在上海工作，她是医生", "我妹妹在上海工作，她是医生"),
    ],
)
def test_it_keeps_a_fact_whose_references_it_names_itself(content: str, said: str) -> None:
    assert gate.DANGLING_REFERENCE not in judge(content, said)


# --- grounded ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("User lives in Berlin.", "I love travelling, last year I went to Rome."),
        ("User has 3 children.", "I have two children."),
        ("User uses PostgreSQL 16.", "We use MySQL at work."),
        ("用户住在杭州", "我很喜欢旅游"),
        ("用户养了一只猫", "我喜欢看电影"),
    ],
)
def test_it_rejects_a_fact_the_users_words_do_not_say(content: str, said: str) -> None:
    assert gate.UNGROUNDED in judge(content, said)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("User enjoys hiking on weekends.", "I'm really into hiking, mostly on weekends."),
        ("User is a site reliability engineer at Google.", "I work at Google as an SRE."),
        ("User prefers answers in English.", "Please always answer in English."),
        ("用户喜欢打篮球", "我超爱打篮球"),
        ("User prefers to be answered in Chinese.", "以后请用中文回答我"),  # the other language: numbers only
    ],
)
def test_it_keeps_a_fact_in_its_own_words_when_the_user_said_it(content: str, said: str) -> None:
    assert gate.UNGROUNDED not in judge(content, said)


def test_a_project_fact_may_name_the_project_the_turn_is_in() -> None:
    reasons = judge("shop-api 仓库统一使用 PostgreSQL 16。", "这个仓库统一用 PostgreSQL 16", project_id="shop-api")
    assert gate.UNGROUNDED not in reasons


def test_groundedness_reads_the_whole_message_the_quote_is_from() -> None:
    rows: list[Row] = [
        {"id": "u1", "role": "user", "content": "We pin Airflow 2.9. Never use SubDAGs, use TaskGroups."}
    ]
    candidate = fact_model(
        content="Airflow is pinned to 2.9 and TaskGroups replace SubDAGs.", evidence_text="We pin Airflow 2.9."
    )
    assert gate.UNGROUNDED not in gate.judge_fact(candidate, rows, project_id=None, threshold=0.7)


# --- keys -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "content"),
    [
        ("response_language", "User took French in high school."),
        ("response_language", "User prefers Sichuan and Cantonese cuisine."),
        ("response_length", "User likes hiking and long-distance running."),
        ("name", "User likes the band Guns N' Roses."),
        ("location", "User prefers tea to coffee."),
    ],
)
def test_a_single_valued_key_is_refused_for_a_statement_about_something_else(key: str, content: str) -> None:
    assert wording.key_mismatch(key, content)


@pytest.mark.parametrize(
    ("key", "content"),
    [
        ("response_language", "User wants answers in English."),
        ("response_language", "用户偏好用中文解释技术问题。"),
        ("response_length", "User prefers two or three short paragraphs."),
        ("name", "User's name is Emily."),
        ("location", "User lives in Berlin."),
        ("pref_french_food", "User took French in high school."),  # not a single-valued key: its own
    ],
)
def test_a_key_is_kept_when_the_statement_is_about_its_attribute(key: str, content: str) -> None:
    assert not wording.key_mismatch(key, content)


def test_key_mismatch_is_a_reason_a_reviewer_sees() -> None:
    said = "It was much easier when I took French in high school."
    assert gate.KEY_MISMATCH in judge("User took French in high school.", said, key="response_language")


def test_every_single_valued_key_is_documented() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "extraction.md").read_text(encoding="utf-8")
    assert all(f"`{key}`" in doc for key in wording.SINGLE_VALUED)


# --- in a run, and in review ------------------------------------------------------------


@pytest.mark.django_db
def test_a_reviewer_can_overturn_a_wording_reason_and_the_card_is_written() -> None:
    from facts.curation import review
    from facts.models import FactCard
    from tests.factories import fact_candidate
    from tests.test_gate import run_gate

    rows: list[Row] = [{"id": "u1", "role": "user", "content": "我最近在读《三体》，我很喜欢这本书。"}]
    dangling = fact_candidate(key="likes_book", content="用户很喜欢这本书", evidence_text="我很喜欢这本书")
    [candidate] = run_gate({"facts": [dangling]}, rows=rows)
    assert candidate.verdict == "rejected" and candidate.reasons == [gate.DANGLING_REFERENCE]
    assert not FactCard.objects.filter(status="active").exists()
    fact_id = review.apply_candidate(candidate, actor="reviewer", note="", overrides={"content": "用户很喜欢《三体》"})
    assert FactCard.objects.get(id=fact_id).content == "用户很喜欢《三体》"
