"""The agents' HTTP API under /api/v1/."""

urlpatterns: list = []
