"""Dashboard URLs of this app (included at the site root by memoryadmin.urls)."""

from django.urls import path

urlpatterns: list = []
