"""The write gate: one test per rule (accept and reject side), and applying."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from facts.curation import review
from facts.intake.filtering import Row
from facts.judging import gate, runs
from facts.judging.schemas import FactCandidate, SummaryCandidate, parse_update
from facts.models import AuditEvent, Candidate, ExtractionRun, FactCard
from facts.storage.store import Bucket, Store
from tests.factories import fact_candidate, fact_model

ROWS: list[Row] = [
    {
        "id": "u1",
        "role": "user",
        "content": "我主要做 Python 后端开发，平时请用中文解释技术问题。这个仓库用 PostgreSQL。",
    },
    {"id": "a1", "role": "assistant", "content": "明白。看起来你是一名资深工程师。"},
    {"id": "u2", "role": "user", "content": "验证后可以把这次修改提交并推送。"},
]


def judge(candidate: FactCandidate, project_id: str | None = None, threshold: float = 0.7) -> list[str]:
    return gate.judge_fact(candidate, ROWS, project_id=project_id, threshold=threshold)


# --- pure rules ---------------------------------------------------------------


def test_it_accepts_a_durable_descriptive_user_fact_with_user_evidence() -> None:
    assert judge(fact_model()) == []


def test_it_rejects_thread_scoped_facts() -> None:
    assert judge(fact_model(scope="thread")) == ["scope_thread"]


def test_it_rejects_project_scoped_facts_without_a_project() -> None:
    assert judge(fact_model(scope="project")) == ["scope_project"]


def test_it_accepts_project_scoped_facts_when_the_turn_has_a_project() -> None:
    assert judge(fact_model(scope="project"), project_id="shop-api") == []


def test_it_rejects_temporary_facts() -> None:
    assert judge(fact_model(durability="temporary")) == ["temporary"]


def test_it_rejects_transactional_facts_even_when_they_claim_to_be_durable() -> None:
    grant = fact_model(
        key="push", content="允许推送", evidence_message_id="u2", evidence_text="可以把这次修改提交并推送"
    )
    assert judge(grant.model_copy(update={"authority": "transactional"})) == ["transactional"]


def test_it_rejects_low_confidence() -> None:
    assert judge(fact_model(confidence=0.69)) == ["low_confidence"]


def test_it_accepts_confidence_exactly_at_the_threshold() -> None:
    assert judge(fact_model(confidence=0.7)) == []


def test_it_uses_the_configured_threshold() -> None:
    assert judge(fact_model(confidence=0.8), threshold=0.85) == ["low_confidence"]


def test_it_rejects_a_real_zero_confidence() -> None:
    assert judge(fact_model(confidence=0.0)) == ["low_confidence"]


def test_it_rejects_evidence_that_is_not_in_the_named_message() -> None:
    assert judge(fact_model(evidence_text="我喜欢英文")) == ["evidence_missing"]


def test_it_rejects_evidence_naming_a_message_that_is_not_in_the_conversation() -> None:
    assert judge(fact_model(evidence_message_id="m-injected")) == ["evidence_missing"]


def test_it_rejects_evidence_found_only_in_an_assistant_message() -> None:
    guess = fact_model(
        key="seniority", content="用户是资深工程师", evidence_message_id="a1", evidence_text="资深工程师"
    )
    assert judge(guess) == ["evidence_not_user"]


def test_it_rejects_evidence_copied_from_an_assistant_message_but_attributed_to_the_user() -> None:
    assert judge(fact_model(evidence_text="资深工程师")) == ["evidence_missing"]


def test_it_matches_evidence_ignoring_case_spacing_and_quotes() -> None:
    assert judge(fact_model(evidence_text="“python  后端开发”")) == []


def test_it_records_every_failed_rule_not_just_the_first() -> None:
    bad = fact_model(
        scope="thread", durability="temporary", authority="transactional", confidence=0.1, evidence_message_id="a1"
    )
    assert judge(bad) == [
        "scope_thread",
        "temporary",
        "transactional",
        "low_confidence",
        "evidence_not_user",
        "evidence_missing",
    ]


def summary(**overrides: Any) -> SummaryCandidate:
    data = {
        "section": "workContext",
        "summary": "用户主要从事 Python 后端开发。",
        "scope": "user",
        "authority": "descriptive",
        "evidence_message_id": "u1",
        "evidence_text": "我主要做 Python 后端开发",
    }
    data.update(overrides)
    return SummaryCandidate.model_validate(data)


def test_it_accepts_a_user_descriptive_summary_with_user_evidence() -> None:
    assert gate.judge_summary(summary(), ROWS) == []


@pytest.mark.parametrize(
    ("overrides", "reasons"),
    [
        ({"scope": "thread"}, ["scope_thread"]),
        ({"scope": "project"}, ["scope_project"]),
        ({"authority": "transactional", "summary": "允许推送"}, ["transactional"]),
        ({"evidence_message_id": "a1", "evidence_text": "资深工程师"}, ["evidence_not_user"]),
        ({"evidence_text": "我是前端"}, ["evidence_missing"]),
    ],
)
def test_it_gates_summaries_like_facts(overrides: dict[str, Any], reasons: list[str]) -> None:
    assert gate.judge_summary(summary(**overrides), ROWS) == reasons


# --- recording and applying -----------------------------------------------------


def make_run(**kwargs: Any) -> ExtractionRun:
    data = {"user_id": "alice", "agent_name": "coder", "thread_id": "t1", "filtered_rows": ROWS}
    data.update(kwargs)
    return ExtractionRun.objects.create(**data)


def run_gate(
    raw: dict[str, Any], *, rows: list[Row] = ROWS, project_id: str | None = None, mode: str = "auto"
) -> list[Candidate]:
    ctx = runs.Context(
        user_id="alice", agent_name="coder", thread_id="t1", project_id=project_id, rows=rows, mode=mode, threshold=0.7
    )
    return runs.apply_run(make_run(project_id=project_id or ""), parse_update(raw), ctx)


def live_cards(**filters: Any) -> list[FactCard]:
    return list(FactCard.objects.filter(status="active", **filters))


ARTICLE_CANDIDATES = {
    "facts": [
        fact_candidate(),
        fact_candidate(
            key="database",
            content="当前仓库使用 PostgreSQL。",
            category="context",
            scope="thread",
            evidence_text="这个仓库用 PostgreSQL",
        ),
        fact_candidate(
            key="push_permission",
            content="用户允许提交并推送修改。",
            category="context",
            authority="transactional",
            evidence_message_id="u2",
            evidence_text="可以把这次修改提交并推送",
        ),
    ]
}


@pytest.mark.django_db
def test_it_saves_the_articles_preference_and_rejects_the_thread_fact_and_the_grant(store: Store) -> None:
    candidates = run_gate(ARTICLE_CANDIDATES)
    assert [(c.key, c.verdict, c.reasons) for c in candidates] == [
        ("response_language", "accepted", []),
        ("database", "rejected", ["scope_thread"]),
        ("push_permission", "rejected", ["transactional"]),
    ]
    [card] = live_cards()
    assert card.content == "用户偏好用中文解释技术问题。"
    assert card.source_kind == "extraction" and card.source_message_id == "u1"
    assert store.read_card(Bucket("alice", "coder"), card.id).content == card.content
    assert Candidate.objects.filter(review_state="pending").count() == 2


@pytest.mark.django_db
def test_it_keeps_an_invalid_candidate_with_its_raw_form_and_applies_the_rest() -> None:
    raw = {"facts": [fact_candidate(key="broken", confidence=1.2), fact_candidate()]}
    broken, good = run_gate(raw)
    assert (broken.verdict, broken.reasons) == ("rejected", ["invalid"])
    assert broken.raw["confidence"] == 1.2 and "confidence" in broken.validation_error
    assert broken.key == "broken" and broken.confidence == 1.2
    assert good.verdict == "accepted" and good.fact_id
    assert len(live_cards()) == 1


@pytest.mark.django_db
def test_it_stores_nan_from_the_model_readably() -> None:
    [bad] = run_gate({"facts": [fact_candidate(confidence=float("nan"))]})
    assert bad.reasons == ["invalid"] and bad.raw["confidence"] == "nan" and bad.confidence is None


@pytest.mark.django_db
def test_re_extracting_the_same_fact_leaves_the_card_byte_identical(store: Store) -> None:
    [first] = run_gate({"facts": [fact_candidate()]})
    path = store.path_for(Bucket("alice", "coder"), first.fact_id)
    before = path.read_bytes()
    [again] = run_gate({"facts": [fact_candidate(confidence=0.99)]})
    assert (again.verdict, again.reasons) == ("rejected", ["duplicate"])
    assert again.review_state == "none"
    assert path.read_bytes() == before
    assert FactCard.objects.get(id=first.fact_id).confidence == 0.9


@pytest.mark.django_db
def test_it_finds_duplicates_within_one_batch() -> None:
    first, second = run_gate({"facts": [fact_candidate(), fact_candidate(key="lang2")]})
    assert first.verdict == "accepted" and second.reasons == ["duplicate"]


@pytest.mark.django_db
def test_a_new_value_for_the_same_key_supersedes_the_old_card(store: Store) -> None:
    [old] = run_gate({"facts": [fact_candidate()]})
    english = fact_candidate(content="User prefers explanations in English.", evidence_text="用中文解释")
    [new] = run_gate({"facts": [english]})
    assert new.verdict == "accepted"
    retired = store.read_card(Bucket("alice", "coder"), old.fact_id)
    assert retired.status == "superseded" and retired.superseded_by == new.fact_id
    assert [c.id for c in live_cards()] == [new.fact_id]
    assert FactCard.objects.get(id=old.fact_id).status == "superseded"


@pytest.mark.django_db
def test_two_values_for_one_key_in_one_batch_leave_only_the_last_live() -> None:
    a, b = run_gate({"facts": [fact_candidate(), fact_candidate(content="用户偏好中文回答。", evidence_text="中文")]})
    assert [c.id for c in live_cards()] == [b.fact_id]
    assert FactCard.objects.get(id=a.fact_id).superseded_by == b.fact_id


@pytest.mark.django_db
def test_an_explicit_confirmation_updates_the_confirmation_fields(store: Store) -> None:
    [first] = run_gate({"facts": [fact_candidate()]})
    rows: list[Row] = [{"id": "u9", "role": "user", "content": "对，我还是希望用中文解释。"}]
    [confirmation] = run_gate(
        {
            "confirmations": [
                {"key": "response_language", "evidence_message_id": "u9", "evidence_text": "还是希望用中文解释"}
            ]
        },
        rows=rows,
    )
    assert confirmation.verdict == "accepted" and confirmation.fact_id == first.fact_id
    card = store.read_card(Bucket("alice", "coder"), first.fact_id)
    assert card.confirmation_count == 1 and card.last_confirmed_at is not None
    assert card.confidence == 0.9


@pytest.mark.django_db
def test_a_confirmation_without_user_evidence_changes_nothing(store: Store) -> None:
    [first] = run_gate({"facts": [fact_candidate()]})
    [confirmation] = run_gate(
        {"confirmations": [{"key": "response_language", "evidence_message_id": "a1", "evidence_text": "明白"}]}
    )
    assert confirmation.reasons == ["evidence_not_user"]
    assert store.read_card(Bucket("alice", "coder"), first.fact_id).confirmation_count == 0


@pytest.mark.django_db
def test_a_confirmation_of_an_unknown_fact_is_invalid() -> None:
    [confirmation] = run_gate(
        {"confirmations": [{"key": "nothing_here", "evidence_message_id": "u1", "evidence_text": "中文"}]}
    )
    assert confirmation.reasons == ["invalid"] and confirmation.validation_error


@pytest.mark.django_db
def test_project_facts_go_to_the_project_bucket_only_with_a_project(store: Store, memory_root: Path) -> None:
    project_fact = fact_candidate(
        key="database", content="仓库使用 PostgreSQL。", category="context", scope="project", evidence_text="PostgreSQL"
    )
    [without] = run_gate({"facts": [project_fact]})
    assert without.reasons == ["scope_project"]
    [with_project] = run_gate({"facts": [project_fact]}, project_id="shop-api")
    card = FactCard.objects.get(id=with_project.fact_id)
    assert (card.project_id, card.user_id) == ("shop-api", "")
    assert store.read_card(Bucket(project_id="shop-api"), card.id) is not None
    assert list((memory_root / "projects" / "shop-api").rglob("*.md"))


@pytest.mark.django_db
def test_accepted_summaries_replace_the_profile_section(store: Store) -> None:
    focus = {
        "section": "topOfMind",
        "summary": "接下来几个月系统学习 Agent 上下文工程。",
        "scope": "user",
        "authority": "descriptive",
        "evidence_message_id": "u1",
        "evidence_text": "Python 后端",
    }
    run_gate({"summaries": [focus]})
    run_gate({"summaries": [focus | {"summary": "准备 PostgreSQL 迁移。", "evidence_text": "PostgreSQL"}]})
    section = store.read_profile("alice").section("topOfMind")
    assert section.summary == "准备 PostgreSQL 迁移。"
    assert section.source.kind == "extraction"


@pytest.mark.django_db
def test_a_transactional_summary_never_reaches_the_profile(store: Store) -> None:
    grant = {
        "section": "topOfMind",
        "summary": "允许推送",
        "scope": "user",
        "authority": "transactional",
        "evidence_message_id": "u2",
        "evidence_text": "推送",
    }
    [candidate] = run_gate({"summaries": [grant]})
    assert candidate.reasons == ["transactional"]
    assert store.read_profile("alice").section("topOfMind").summary == ""


@pytest.mark.django_db
def test_manual_mode_waits_for_a_reviewer() -> None:
    [candidate] = run_gate({"facts": [fact_candidate()]}, mode="manual")
    assert (candidate.verdict, candidate.review_state, candidate.fact_id) == ("accepted", "pending", "")
    assert live_cards() == []


@pytest.mark.django_db
def test_a_reviewer_approves_a_waiting_candidate(reviewer: Any) -> None:
    [candidate] = run_gate({"facts": [fact_candidate()]}, mode="manual")
    fact_id = review.apply_candidate(candidate, actor="reviewer", note="looks right")
    candidate.refresh_from_db()
    assert candidate.review_state == "approved" and candidate.fact_id == fact_id
    assert candidate.reviewed_by == reviewer
    card = FactCard.objects.get(id=fact_id)
    assert card.source_kind == "review"
    assert AuditEvent.objects.get(action="approve").target == f"candidate:{candidate.pk}"


@pytest.mark.django_db
def test_a_reviewer_corrects_and_approves_a_rejected_candidate() -> None:
    _, thread_fact, _ = run_gate(ARTICLE_CANDIDATES)
    fact_id = review.apply_candidate(
        thread_fact,
        actor="reviewer",
        note="really a habit",
        overrides={"content": "用户常用 PostgreSQL。", "confidence": 0.8},
    )
    card = FactCard.objects.get(id=fact_id)
    assert (card.content, card.confidence, card.user_id) == ("用户常用 PostgreSQL。", 0.8, "alice")
    assert AuditEvent.objects.get(action="correct").details["overrides"]["confidence"] == 0.8


@pytest.mark.django_db
def test_a_reviewer_cannot_approve_nonsense_overrides() -> None:
    [candidate] = run_gate({"facts": [fact_candidate(scope="thread")]})
    with pytest.raises(review.ReviewError):
        review.apply_candidate(candidate, actor="r", note="", overrides={"confidence": 3})
    with pytest.raises(review.ReviewError):
        review.apply_candidate(candidate, actor="r", note="", overrides={"scope": "user"})


@pytest.mark.django_db
def test_approving_a_repeat_returns_the_existing_card_without_a_write() -> None:
    [first] = run_gate({"facts": [fact_candidate()]})
    [again] = run_gate({"facts": [fact_candidate()]})
    assert review.apply_candidate(again, actor="r", note="") == first.fact_id
    assert FactCard.objects.get(id=first.fact_id).revision == 1


@pytest.mark.django_db
def test_a_reviewer_dismisses_a_candidate() -> None:
    [candidate] = run_gate({"facts": [fact_candidate(scope="thread")]})
    review.dismiss_candidate(candidate, actor="reviewer", note="one-off")
    candidate.refresh_from_db()
    assert candidate.review_state == "dismissed" and candidate.review_note == "one-off"
    assert AuditEvent.objects.filter(action="dismiss").count() == 1
    assert live_cards() == []


@pytest.mark.django_db
def test_a_reviewer_approves_a_summary(store: Store) -> None:
    [candidate] = run_gate(
        {
            "summaries": [
                {
                    "section": "workContext",
                    "summary": "后端工程师",
                    "scope": "thread",
                    "authority": "descriptive",
                    "evidence_message_id": "u1",
                    "evidence_text": "后端",
                }
            ]
        }
    )
    assert review.apply_candidate(candidate, actor="r", note="") is None
    assert store.read_profile("alice").section("workContext").summary == "后端工程师"


def test_every_reason_code_is_listed() -> None:
    assert set(gate.REASON_CODES) == {
        "scope_thread", "scope_project", "temporary", "transactional", "low_confidence",
        "evidence_missing", "evidence_not_user", "dangling_reference", "ungrounded", "key_mismatch",
        "duplicate", "invalid",
    }  # fmt: skip
