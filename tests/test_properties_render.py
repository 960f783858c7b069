"""Property: the rendered memory block never exceeds its budget (counted with the real
tokenizer on the text as sent), corrections stay within their own budget, every fact is
whole or absent, and each queue stops at its first misfit (never skips ahead)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from facts.models import FactCard
from facts.storage.profilefile import Section
from facts.storage.writer import Delete, Put, commit, commit_profile
from retrieval.factline import as_written
from retrieval.render import render_context
from retrieval.tokens import count_tokens

from .helpers_reliability.fuzz import examples

pytestmark = pytest.mark.django_db

# Symbols (S: < > & + …) too: memory text is shown as written, and cl100k must still
# never merge across the pieces the count is summed from.
words = st.text(st.characters(codec="utf-8", categories=["L", "N", "P", "S", "Zs"]), min_size=1, max_size=120)
facts = st.lists(
    st.tuples(st.sampled_from(["preference", "context", "goal", "correction"]), words, st.floats(0, 1)),
    max_size=10,
)


@settings(
    max_examples=examples(40), deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)  # fmt: skip
@given(
    items=facts,
    profile=st.none() | words,
    budget=st.integers(0, 400),
    correction_share=st.floats(0, 1),
    top_n=st.integers(0, 12),
)
def test_the_block_never_exceeds_its_budgets(make_card, items, profile, budget, correction_share, top_n) -> None:
    old = [make_card(id=row.id, user_id="prop", agent_name="coder") for row in FactCard.objects.filter(user_id="prop")]
    if old:
        commit([Delete(card) for card in old], actor="t")
    cards = [
        make_card(user_id="prop", agent_name="coder", category=cat, content=text.strip() or "x", confidence=conf)
        for cat, text, conf in items
    ]
    if cards:
        commit([Put(card) for card in cards], actor="t")

    def set_profile(p):
        p.set_section("workContext", Section(summary=profile or ""))
        return p

    commit_profile("prop", set_profile, actor="t")
    correction_budget = int(budget * correction_share)
    rendered = render_context(
        user_id="prop", agent_name="coder", budget=budget, correction_budget=correction_budget, top_n=top_n
    )
    assert count_tokens(rendered.text) == rendered.tokens
    assert rendered.tokens <= budget
    assert len(rendered.included) <= top_n
    assert rendered.sections.get("corrections", 0) <= correction_budget
    by_id = {card.id: card for card in cards}
    for fact_id in rendered.included:
        assert as_written(" ".join(by_id[fact_id].content.split())) in rendered.text, "a fact was cut"
    for is_correction in (True, False):
        queue = sorted((c for c in cards if (c.category == "correction") == is_correction), key=lambda c: -c.confidence)
        shown = [c.id for c in queue if c.id in rendered.included]
        # the shown facts of a queue are a prefix of it (ties in confidence may swap)
        assert (
            len(shown) == 0
            or {c.id for c in queue[: len(shown)]} == set(shown)
            or any(queue[i].confidence == queue[i + 1].confidence for i in range(len(queue) - 1))
        )
