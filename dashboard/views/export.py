"""Dashboard export of everything held about one user (admins only, audited)."""

from __future__ import annotations

import tempfile

from django.contrib.auth.decorators import login_required, permission_required
from django.http import FileResponse, HttpRequest
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from dashboard.forms.common import UserIdForm
from dashboard.helpers import actor_of
from facts.access import ADMINISTER
from facts.portability import export


@login_required
@permission_required(ADMINISTER, raise_exception=True)
@require_http_methods(["GET", "POST"])
def export_user(request: HttpRequest) -> HttpResponseBase:
    """GET shows what the archive will hold; POST (the button, CSRF-checked) sends it.

    The user id is always the `user` query parameter, for both: the page and its form
    name the same person, and a person page can link here with `?user=`.
    """
    form = UserIdForm(request.GET)
    if not form.is_valid():  # an id no door accepts (400), or no such person (404)
        return render(request, "dashboard/export.html", {"form": form}, status=form.status)
    user_id = form.cleaned_data["user"]
    if request.method == "GET":
        counts = export.export_counts(user_id)
        return render(request, "dashboard/export.html", {"form": form, "user_id": user_id, "counts": counts})
    # A temp file, not memory: a user with years of turns makes a large archive.
    spool = tempfile.TemporaryFile()  # noqa: SIM115 - FileResponse closes it once sent
    try:
        summary = export.export_user(user_id, spool)
    except BaseException:
        spool.close()
        raise
    export.audit_export(actor_of(request), summary)
    spool.seek(0)
    return FileResponse(
        spool,
        as_attachment=True,
        filename=export.default_filename(user_id),
        content_type="application/zip",
    )
