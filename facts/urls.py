"""Dashboard URLs of this app (included at the site root by memoryadmin.urls)."""

from django.urls import path

from . import views, views_export, views_people, views_profiles, views_review, views_turns

urlpatterns = [
    path("facts/", views.fact_list, name="fact_list"),
    path("facts/<str:fact_id>/", views.fact_detail, name="fact_detail"),
    path("facts/<str:fact_id>/correct/", views.fact_correct, name="fact_correct"),
    path("facts/<str:fact_id>/expire/", views.fact_expire, name="fact_expire"),
    path("facts/<str:fact_id>/restore/", views.fact_restore, name="fact_restore"),
    path("facts/<str:fact_id>/review-by/", views.fact_review_by, name="fact_review_by"),
    path("facts/<str:fact_id>/revert/<int:revision>/", views.fact_revert, name="fact_revert"),
    path("facts/<str:fact_id>/delete/", views.fact_delete, name="fact_delete"),
    path("forget/", views_people.forget_thread, name="forget_thread"),
    path("people/", views_people.people, name="people"),
    path("people/user/", views_people.person, name="person"),
    path("people/user/erase/", views_people.person_erase, name="person_erase"),
    path("conflicts/", views.conflicts, name="conflicts"),
    path("conflicts/resolve/", views.resolve_conflict, name="resolve_conflict"),
    path("review/", views_review.review_queue, name="review_queue"),
    path("review/badge/", views_review.open_count, name="review_badge"),
    path("review/bulk/", views_review.bulk_review, name="bulk_review"),
    path("review/<int:pk>/", views_review.candidate_detail, name="candidate_detail"),
    path("review/<int:pk>/approve/", views_review.candidate_approve, name="candidate_approve"),
    path("review/<int:pk>/dismiss/", views_review.candidate_dismiss, name="candidate_dismiss"),
    path("profiles/", views_profiles.profiles, name="profiles"),
    path("turns/", views_turns.turn_problems, name="turn_problems"),
    path("turns/badge/", views_turns.turn_badge, name="turn_badge"),
    path("turns/retry/", views_turns.turn_retry_all, name="turn_retry_all"),
    path("turns/<int:pk>/retry/", views_turns.turn_retry, name="turn_retry"),
    path("profiles/edit/", views_profiles.profile_edit, name="profile_edit"),
    path("export/", views_export.export_user, name="export_user"),
]
