"""The curators' rough edges (issue 21): the context preview's links and wording, the
review queue's states, bulk selection, legend and undo, profile revert, confirmations,
times with their zone, the fact page's heading and path, the favicon."""

from __future__ import annotations

import re

from django.test import Client

from facts.writer import save_card

# --- context preview ----------------------------------------------------------------------


def test_it_previews_the_agents_busiest_user_from_the_agents_page_link(admin_client_: Client, make_card) -> None:
    save_card(make_card(user_id="bob", content="Bob likes tea."), actor="t")
    for n in range(2):
        save_card(make_card(user_id="alice", content=f"Alice fact {n}."), actor="t")
    body = admin_client_.get("/agents/").content.decode()
    link = re.search(r'href="(/preview/\?agent=coder)"', body)
    assert link, "the agents page links to the preview of each agent"
    response = admin_client_.get(link.group(1).replace("&amp;", "&"))
    assert response.context["form"].cleaned_data["user"] == "alice"
    assert "Alice fact 0." in response.content.decode()
    assert "the user with the most facts for this agent" in response.content.decode()
    assert b"This field is required" not in response.content


def test_it_previews_the_users_main_agent_from_a_profile_link_without_an_error(
    viewer_client: Client, make_card
) -> None:
    save_card(make_card(agent_name="writer", content="Writes in French."), actor="t")
    response = viewer_client.get("/preview/", {"user": "alice"})
    text = response.content.decode()
    assert "This field is required" not in text
    assert response.context["form"].cleaned_data["agent"] == "writer"
    assert "Writes in French." in text


def test_it_shows_a_blank_form_without_errors_when_nothing_can_be_picked(viewer_client: Client) -> None:
    response = viewer_client.get("/preview/", {"agent": "nobody-uses-me"})
    assert b"This field is required" not in response.content
    assert b'value="nobody-uses-me"' in response.content
    assert "rendered" not in response.context


def test_it_still_reports_a_field_the_curator_emptied(viewer_client: Client) -> None:
    response = viewer_client.get("/preview/", {"user": "alice", "agent": ""})
    assert b"This field is required" in response.content


def test_it_words_left_out_facts_once_and_lists_no_phantom_included_fact(viewer_client: Client, make_card) -> None:
    save_card(make_card(content="A fact " + "with many words " * 30), actor="t")
    response = viewer_client.get("/preview/", {"user": "alice", "agent": "coder", "budget": 40})
    text = response.content.decode()
    assert "over the total token budget" in text
    assert "budget did not fit in the budget" not in text and "expired expired" not in text
    assert '<li class="muted">none</li>' not in text
    assert "No facts were included." in text


def test_it_explains_why_a_correction_is_cut_by_the_total_budget(viewer_client: Client, make_card, store) -> None:
    from facts.profilefile import Section
    from facts.writer import commit_profile

    def fill(profile):
        profile.set_section("workContext", Section(summary="Works on compilers " * 20))
        return profile

    commit_profile("alice", fill, actor="t", reason="seed")
    save_card(
        make_card(category="correction", content="Her name is spelled Alicia, not Alice. " + "Alicia always. " * 30),
        actor="t",
    )
    response = viewer_client.get(
        "/preview/", {"user": "alice", "agent": "coder", "budget": 200, "correction_budget": 190}
    )
    text = response.content.decode()
    room = response.context["correction_room"]
    assert room < 190
    assert f"leaving {room} tokens for corrections" in text
    assert "is a cap inside the total" in text
    assert "Work context" in text  # the section's label, not its key
