"""A confirm step for actions that cannot be taken back lightly (revoke a key, keep one
card of a conflict, revert a profile).

The action's form posts as usual. Without `confirmed=yes` the view answers with a page
that says what will happen and re-posts the same fields with it, so the step works
without JavaScript; `static/js/confirm.js` asks the same question in a <dialog> first and
adds `confirmed=yes` itself, so with JavaScript the page is never seen.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

CONFIRMED = "confirmed"


def confirm_first(
    request: HttpRequest, *, question: str, button: str, cancel: str, extra: dict[str, Any] | None = None
) -> HttpResponse | None:
    """None when the curator confirmed; else the confirm page (status 200, nothing done)."""
    if request.POST.get(CONFIRMED) == "yes":
        return None
    fields = [
        (name, value)
        for name, values in request.POST.lists()
        if name not in ("csrfmiddlewaretoken", CONFIRMED)
        for value in values
    ]
    ctx = {"question": question, "button": button, "cancel": cancel, "fields": fields, "action": request.path}
    return render(request, "includes/confirm.html", {**ctx, **(extra or {})})
