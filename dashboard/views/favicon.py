"""/favicon.ico: browsers ask for it at the root whatever the page links, before login."""

from __future__ import annotations

from django.contrib.staticfiles import finders
from django.http import FileResponse, Http404, HttpRequest
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET

FAVICON = "img/favicon.ico"


@require_GET
@cache_control(max_age=86400, public=True)
def favicon(request: HttpRequest) -> FileResponse:
    # Served from the static sources, so it works before `collectstatic` too.
    path = finders.find(FAVICON)
    if not path:
        raise Http404("no favicon")
    return FileResponse(open(path, "rb"), content_type="image/x-icon")
