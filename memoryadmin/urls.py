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

# Styled error pages with the navigation (dashboard/views/errors.py).
handler403 = "dashboard.views.errors.permission_denied"
handler404 = "dashboard.views.errors.page_not_found"
handler500 = "dashboard.views.errors.server_error"
