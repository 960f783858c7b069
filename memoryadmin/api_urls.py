"""The agents' HTTP API under /api/v1/ (described by memoryadmin/openapi.py)."""

from django.urls import path, re_path

from . import api

urlpatterns = [
    path("turns", api.turns, name="api_turns"),
    path("flush", api.flush, name="api_flush"),
    path("context", api.context, name="api_context"),
    path("search", api.search, name="api_search"),
    path("health", api.health, name="api_health"),
    path("openapi.json", api.openapi, name="api_openapi"),
    # Anything else under /api/v1/ answers in the API's JSON error format.
    re_path(r"^(?P<rest>.*)$", api.not_found, name="api_not_found"),
]
