"""Dashboard URLs of this app (included at the site root by memoryadmin.urls)."""

from django.urls import path

from . import views

urlpatterns = [
    path("preview/", views.context_preview, name="context_preview"),
    path("preview/settings/", views.save_agent_budgets, name="save_agent_budgets"),
    path("search/", views.search_playground, name="search_playground"),
    path("search/golden/", views.golden_save, name="golden_save"),
    path("search/golden/check/", views.golden_check, name="golden_check"),
    path("search/golden/<int:pk>/delete/", views.golden_delete, name="golden_delete"),
]
