from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from memoryadmin import mcp_http

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include("memoryadmin.api_urls")),
    # bearer keys, like the API (unnamed: not a dashboard page)
    path("mcp", mcp_http.endpoint),
    path("", include("dashboard.urls")),
    path("admin/", admin.site.urls),
]
