"""Every dashboard page's URL (included at the site root by memoryadmin.urls)."""

from django.urls import path

from .views import (
    agents,
    audit,
    conflicts,
    export,
    facts,
    index,
    overview,
    people,
    preview,
    profiles,
    review,
    runs,
    search,
    turns,
)

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("facts/", facts.fact_list, name="fact_list"),
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
]

# Extraction runs (issue 21).
urlpatterns += [
    path("runs/", runs.runs_list, name="runs-list"),
    path("runs/<int:pk>/", runs.runs_detail, name="runs-detail"),
    path("runs/<int:pk>/retry/", runs.runs_retry, name="runs-retry"),
]
