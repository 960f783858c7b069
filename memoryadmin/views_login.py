"""The page a locked-out login gets (django-axes calls `locked_out` instead of its own
bare 403 text): the login page itself, saying why and until when."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.db.models import Max
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

TOO_MANY_REQUESTS = 429


def _locked_until(username: str) -> datetime | None:
    last = AccessAttempt.objects.filter(username=username).aggregate(last=Max("attempt_time"))["last"]
    return last + settings.AXES_COOLOFF_TIME if last else None


def locked_out(request: HttpRequest, response: HttpResponse | None, credentials: dict[str, Any] | None) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: answer a refused login with the login page and a 429."""
    username = str((credentials or {}).get("username") or request.POST.get("username", ""))
    form = AuthenticationForm(request, initial={"username": username})
    context = {
        "form": form,
        "next": request.POST.get("next", request.GET.get("next", "")),
        "locked_out": True,
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "lockout_minutes": round(settings.AXES_COOLOFF_TIME.total_seconds() / 60),
        "locked_until": _locked_until(username),
    }
    return render(request, "registration/login.html", context, status=TOO_MANY_REQUESTS)
