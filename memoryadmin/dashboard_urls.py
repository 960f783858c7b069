"""Dashboard URLs of the project package."""

from django.urls import path

from . import views

urlpatterns = [
    path("index/", views.index_console, name="index_console"),
    path("index/check/", views.index_check, name="index_check"),
    path("index/rebuild/", views.index_rebuild, name="index_rebuild"),
    path("index/rebuild/<int:pk>/", views.rebuild_progress, name="rebuild_progress"),
    path("audit/", views.audit_log, name="audit_log"),
    path("agents/", views.agents, name="agents"),
    path("agents/settings/", views.agent_settings, name="agent_settings"),
    path("agents/keys/", views.api_key_create, name="api_key_create"),
    path("agents/keys/<int:pk>/revoke/", views.api_key_revoke, name="api_key_revoke"),
]
