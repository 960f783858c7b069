"""Dashboard URLs of this app (included at the site root by memoryadmin.urls)."""

urlpatterns: list = []
