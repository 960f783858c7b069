"""Every dashboard page's URL (included at the site root by memoryadmin.urls)."""

from django.contrib.auth import views as auth_views
from django.urls import path

from .views import (
    agents,
    audit,
    conflicts,
    export,
    facts,
    favicon,
    gate,
    index,
    overview,
    people,
    preview,
    profiles,
    projects,
    review,
    runs,
    search,
    team,
    turns,
    users,
)

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("facts/", facts.fact_list, name="fact_list"),
    path("facts/add/", facts.fact_add, name="fact_add"),  # before facts/<id>/ ("add" is no fact id)
    path("facts/<str:fact_id>/", facts.fact_detail, name="fact_detail"),
    path("facts/<str:fact_id>/correct/", facts.fact_correct, name="fact_correct"),
    path("facts/<str:fact_id>/expire/", facts.fact_expire, name="fact_expire"),
    path("facts/<str:fact_id>/restore/", facts.fact_restore, name="fact_restore"),
    path("facts/<str:fact_id>/review-by/", facts.fact_review_by, name="fact_review_by"),
    path("facts/<str:fact_id>/revert/<int:revision>/", facts.fact_revert, name="fact_revert"),
    path("facts/<str:fact_id>/delete/", facts.fact_delete, name="fact_delete"),
    path("forget/", people.forget_thread, name="forget_thread"),
    path("people/", people.people, name="people"),
    path("people/user/", people.person, name="person"),
    path("people/user/erase/", people.person_erase, name="person_erase"),
    path("conflicts/", conflicts.conflicts, name="conflicts"),
    path("conflicts/resolve/", conflicts.resolve_conflict, name="resolve_conflict"),
    path("review/", review.review_queue, name="review_queue"),
    path("review/badge/", review.open_count, name="review_badge"),
    path("review/bulk/", review.bulk_review, name="bulk_review"),
    path("review/<int:pk>/", review.candidate_detail, name="candidate_detail"),
    path("review/<int:pk>/approve/", review.candidate_approve, name="candidate_approve"),
    path("review/<int:pk>/dismiss/", review.candidate_dismiss, name="candidate_dismiss"),
    path("profiles/", profiles.profiles, name="profiles"),
    path("projects/", projects.projects, name="projects"),
    path("projects/settings/", projects.project_settings, name="project_settings"),
    path("turns/", turns.turn_problems, name="turn_problems"),
    path("turns/badge/", turns.turn_badge, name="turn_badge"),
    path("turns/retry/", turns.turn_retry_all, name="turn_retry_all"),
    path("turns/<int:pk>/retry/", turns.turn_retry, name="turn_retry"),
    path("profiles/edit/", profiles.profile_edit, name="profile_edit"),
    path("export/", export.export_user, name="export_user"),
    path("preview/", preview.context_preview, name="context_preview"),
    # The preview's "save as the agent's settings" posts here: the same endpoint as the
    # agents page (`back` brings the curator back to the preview).
    path("preview/settings/", agents.agent_settings, name="save_agent_budgets"),
    path("search/", search.search_playground, name="search_playground"),
    path("search/golden/", search.golden_save, name="golden_save"),
    path("search/golden/check/", search.golden_check, name="golden_check"),
    path("search/golden/<int:pk>/delete/", search.golden_delete, name="golden_delete"),
    path("index/", index.index_console, name="index_console"),
    path("index/check/", index.index_check, name="index_check"),
    path("index/rebuild/", index.index_rebuild, name="index_rebuild"),
    path("index/rebuild/<int:pk>/", index.rebuild_progress, name="rebuild_progress"),
    path("audit/", audit.audit_log, name="audit_log"),
    path("agents/", agents.agents, name="agents"),
    path("agents/settings/", agents.agent_settings, name="agent_settings"),
    path("agents/keys/", agents.api_key_create, name="api_key_create"),
    path("agents/keys/<int:pk>/revoke/", agents.api_key_revoke, name="api_key_revoke"),
    # people and the team
    path("users/", users.users_list, name="users_list"),
    path("users/<path:user_id>/", users.users_detail, name="users_detail"),
    path("pick/users/", users.pick_users, name="pick_users"),
    path("pick/agents/", users.pick_agents, name="pick_agents"),
    path("team/", team.team, name="team"),
    path("team/create/", team.team_create, name="team_create"),
    path("team/<int:pk>/role/", team.team_role, name="team_role"),
    path("team/<int:pk>/active/", team.team_active, name="team_active"),
    path("team/<int:pk>/link/", team.team_link, name="team_link"),
    path(
        "team/set-password/<uidb64>/<token>/",
        team.SetPasswordView.as_view(),
        name="team_set_password",
    ),
    path(
        "team/set-password/done/",
        auth_views.PasswordResetCompleteView.as_view(template_name="registration/set_password_done.html"),
        name="team_password_set",
    ),
    # issue 21 (review): selected rows, undo a dismissal, profile revert, the favicon
    path("review/selected/", review.selected_review, name="selected_review"),
    path("review/restore/", review.candidates_restore, name="candidates_restore"),
    path("profiles/revert/", profiles.profile_revert, name="profile_revert"),
    path("favicon.ico", favicon.favicon),  # public, before login (unnamed: not a page)
    path("gate/", gate.gate_overview, name="gate_overview"),
    path("gate/backtest/", gate.gate_backtest, name="gate_backtest"),
    path("gate/threshold/", gate.gate_threshold, name="gate_threshold"),
    path("injections/", gate.injections, name="injections"),
]

# Extraction runs (issue 21).
urlpatterns += [
    path("runs/", runs.runs_list, name="runs_list"),
    path("runs/<int:pk>/", runs.runs_detail, name="runs_detail"),
    path("runs/<int:pk>/retry/", runs.runs_retry, name="runs_retry"),
]
