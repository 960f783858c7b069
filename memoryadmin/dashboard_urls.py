"""Dashboard URLs of the project package."""

urlpatterns: list = []
