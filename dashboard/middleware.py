"""Pages a signed-in curator sees are never kept by the browser.

Memory changes under a curator's hands: after deleting a fact, Back must not show the
browser's stored copy of its page, still "active" (issue 37). With `no-store` the browser
asks again and gets the truth (here: the 404 of a deleted fact). It also keeps people's
memory out of the disk cache of a shared computer.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.utils.cache import add_never_cache_headers


class NoStoreForSignedIn:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated and not response.has_header("Cache-Control"):
            add_never_cache_headers(response)
        return response
