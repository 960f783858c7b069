"""A URLconf with only the agents' API, for tests and tools that need nothing else."""

from django.urls import include, path

urlpatterns = [path("api/v1/", include("memoryadmin.api_urls"))]
