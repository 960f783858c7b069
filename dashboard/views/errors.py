"""The styled error pages (403, 404, 500), with the navigation, and the middleware that
shows the styled 404 with DEBUG on too.

Django uses `handler403` for a refused permission in both modes, but with DEBUG on it
answers a missing object or an unknown URL with its technical page (the URL patterns,
the settings module), which a curator should never meet. `StyledNotFound` answers those
with the same page as DEBUG off; the agents' doors (`/api/`, `/mcp`) keep their own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string

log = logging.getLogger(__name__)

# Paths whose 404s are not dashboard pages: the agents' doors, the admin, files.
NOT_PAGES = ("/api/", "/mcp", "/admin/", "/static/")


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return render(request, "404.html", status=404)


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    # The reason is ours (PermissionDenied("…") raised by a view), never user input.
    reason = str(exception) if exception is not None and str(exception) else ""
    return render(request, "403.html", {"reason": reason}, status=403)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """A form refused by the CSRF check: the styled page, saying what to do (Django's own
    reason, e.g. "CSRF token missing.", goes to the log, not the page)."""
    log.warning("CSRF check failed on %s: %s", request.path, reason)
    message = (
        "This form could not be accepted: it was opened too long ago, in another session, or "
        "from another site. Reload the page and try again; nothing was changed."
    )
    return render(request, "403.html", {"reason": message, "csrf": True}, status=403)


def server_error(request: HttpRequest) -> HttpResponse:
    """The styled page; if even that fails (the database is what broke, and the
    navigation asks it who is signed in), the same page without the navigation."""
    try:
        return render(request, "500.html", status=500)
    except Exception:
        log.exception("the styled 500 page failed; sending it without the navigation")
        return HttpResponse(render_to_string("500.html", {}), status=500)


def index_unavailable(request: HttpRequest, message: str) -> HttpResponse:
    """A page that needs the search index while it is being rebuilt (issue 34): 503 and
    why, never a page that looks as if memory were empty."""
    response = render(request, "503.html", {"reason": message}, status=503)
    response["Retry-After"] = "5"
    return response


class IndexUnavailablePage:
    """Dashboard pages that read the search index (preview, search playground, golden
    queries) answer `index_unavailable` while it is rebuilt; the agents' doors answer
    their own 503."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        from retrieval.indexdb import IndexUnavailable

        if isinstance(exception, IndexUnavailable) and not request.path.startswith(NOT_PAGES):
            return index_unavailable(request, exception.message)
        return None


class StyledNotFound:
    """With DEBUG on, a dashboard 404 (missing object or unknown URL) is the styled page.

    Placed after CommonMiddleware, so a URL missing its trailing slash is still
    redirected to the slashed one first."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def _is_page(self, request: HttpRequest) -> bool:
        return settings.DEBUG and not request.path.startswith(NOT_PAGES)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        # No resolver_match: no URL pattern matched, and Django's technical 404 answered.
        if response.status_code == 404 and getattr(request, "resolver_match", None) is None and self._is_page(request):
            return page_not_found(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, Http404) and self._is_page(request):
            return page_not_found(request, exception)
        return None
