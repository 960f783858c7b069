"""Profiles: every section of a user's memory.json, editable, with its history (the
edit and the revert are `facts.curation.profiles`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from dashboard.confirm import confirm_first
from dashboard.forms.common import PageForm, UserIdForm
from dashboard.forms.memory import ProfileForm, ProfileRevertForm
from dashboard.helpers import actor_of, diff_lines, flash_errors, page_of
from dashboard.labels import section_label
from facts.access import CURATE
from facts.curation.cards import UnknownRevision
from facts.curation.profiles import edit_profile, revert_profile, summaries, version_summaries
from facts.enums import HISTORY_SECTIONS, PROFILE_SECTIONS, USER_SECTIONS
from facts.models import ProfileRevision, ProfileSection
from facts.storage.errors import InvalidId, RevisionConflict
from facts.storage.profilefile import Profile, Section
from facts.storage.store import get_store


@dataclass
class SectionView:
    name: str
    group: str
    section: Section
    field: Any  # the section's textarea in the one profile form (a BoundField)


@dataclass
class ProfileVersion:
    revision: int
    actor: str
    reason: str
    created_at: datetime
    diffs: list[tuple[str, list[tuple[str, str]]]]


def history_of(user_id: str) -> list[ProfileVersion]:
    revisions = list(ProfileRevision.objects.filter(user_id=user_id).order_by("revision")[:500])
    out: list[ProfileVersion] = []
    previous: dict[str, str] = {}
    for rev in revisions:
        now = summaries(rev.document)
        diffs = []
        for name in PROFILE_SECTIONS:
            if previous.get(name, "") != now.get(name, ""):
                diffs.append((name, diff_lines(previous.get(name, ""), now.get(name, ""))))
        out.append(ProfileVersion(rev.revision, rev.actor, rev.reason, rev.created_at, diffs))
        previous = now
    out.reverse()
    return out


@require_GET
@login_required
def profiles(request: HttpRequest) -> HttpResponse:
    pick = UserIdForm(request.GET if "user" in request.GET else None)
    if not pick.is_bound or not pick.is_valid():
        # A typo or an id no door accepts opens no profile: an editable empty one would
        # create that person on Save.
        users = ProfileSection.objects.values_list("user_id", flat=True).distinct().order_by("user_id")
        paging = PageForm(request.GET)
        page = page_of(request, users, paging.cleaned_data.get("page") if paging.is_valid() else 1)
        status = pick.status if pick.is_bound else 200
        return render(request, "dashboard/profiles.html", {"pick": pick, "page": page}, status=status)
    user_id = pick.cleaned_data["user"]
    try:
        profile = get_store().read_profile(user_id)
    except InvalidId as exc:
        pick.add_error("user", str(exc))
        return render(request, "dashboard/profiles.html", {"pick": pick, "page": None}, status=400)
    initial = {name: profile.section(name).summary for name in PROFILE_SECTIONS}
    form = ProfileForm(initial={**initial, "user": user_id, "revision": profile.revision})
    return render_profile(request, pick, user_id, profile, form)


def render_profile(
    request: HttpRequest, pick: UserIdForm, user_id: str, profile: Profile, form: ProfileForm, status: int = 200
) -> HttpResponse:
    sections = [
        SectionView(name, "user" if name in USER_SECTIONS else "history", profile.section(name), form[name])
        for name in PROFILE_SECTIONS
    ]
    ctx = {
        "pick": pick,
        "user_id": user_id,
        "profile": profile,
        "form": form,
        "sections": sections,
        "history": history_of(user_id),
        "user_sections": USER_SECTIONS,
        "history_sections": HISTORY_SECTIONS,
    }
    return render(request, "dashboard/profile.html", ctx, status=status)


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def profile_edit(request: HttpRequest) -> HttpResponse:
    """Save the whole profile form: the sections whose text the curator changed, in one
    new version. Bad input and a profile changed meanwhile answer the page again with
    every typed word still in its box; nothing is dropped. The person must be one memory
    holds something about (`clean_person`): Save never creates a person."""
    form = ProfileForm(request.POST)
    pick = UserIdForm({"user": request.POST.get("user", "")})
    if not pick.is_valid():
        flash_errors(request, "Not saved:", pick, label=None)
        return redirect("profiles")
    user_id = pick.cleaned_data["user"]
    page = reverse("profiles") + "?" + urlencode({"user": user_id})
    if not form.is_valid():
        flash_errors(request, "Not saved:", form, label=section_label)
        try:
            current = get_store().read_profile(user_id)  # only to answer the page again
        except InvalidId as exc:
            messages.error(request, f"Not saved: {exc}")
            return redirect("profiles")
        return render_profile(request, pick, user_id, current, form, status=400)
    data = form.cleaned_data
    # A section the request does not name is left as it is (a browser sends every box;
    # a script sending one section must not blank the others).
    typed = {name: data[name] for name in PROFILE_SECTIONS if name in request.POST}
    try:
        edit = edit_profile(
            user_id, typed, actor=actor_of(request), reason=data.get("reason", ""), expected_revision=data["revision"]
        )
    except RevisionConflict:
        return conflict(request, pick, user_id, typed, data)
    except InvalidId as exc:
        messages.error(request, f"Not saved: {exc}")
        return redirect("profiles")
    if not edit.sections:
        messages.info(request, "Nothing changed.")
        return redirect(page)
    words = ", ".join(section_label(name) for name in edit.sections)
    messages.success(request, f"Saved {words} (profile revision {edit.profile.revision}).")
    return redirect(page)


def conflict(
    request: HttpRequest, pick: UserIdForm, user_id: str, typed: dict[str, str], data: dict[str, Any]
) -> HttpResponse:
    """The profile changed since the form was opened: answer the form again on the new
    version, keeping what the curator typed in the sections they changed and taking the
    new text in the others, so saving again overwrites nobody by accident."""
    current = get_store().read_profile(user_id)
    shown = version_summaries(user_id, data["revision"])
    merged, both = {}, []
    for name, text in typed.items():
        now = current.section(name).summary
        edited = shown is None or text.strip() != shown.get(name, "").strip()
        merged[name] = text if edited else now
        if edited and shown is not None and now.strip() != shown.get(name, "").strip() and now.strip() != text.strip():
            both.append(section_label(name))
    form = ProfileForm(
        initial={**merged, "user": user_id, "revision": current.revision, "reason": data.get("reason", "")}
    )
    note = f" Changed by both of you: {', '.join(both)} (theirs is in the history below)." if both else ""
    messages.error(
        request,
        f"Not saved yet: the profile changed since you opened it (now revision {current.revision}). "
        f"Your text is kept in the boxes you edited; the others show the new version.{note} Save again to apply it.",
    )
    return render_profile(request, pick, user_id, current, form, status=409)


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def profile_revert(request: HttpRequest) -> HttpResponse:
    """Bring every section's text back to a past version: a new version written through
    the profile writer (history keeps both), audited, after a confirm step showing the diff."""
    form = ProfileRevertForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not reverted: unknown user or version.")
        return redirect("profiles")
    data = form.cleaned_data
    user_id = data["user"]
    page = reverse("profiles") + "?" + urlencode({"user": user_id})
    old = version_summaries(user_id, data["revision"]) if data["revision"] else None
    if old is None:
        messages.error(request, f"Not reverted: {user_id} has no version {data['revision']}.")
        return redirect(page)
    try:
        current = get_store().read_profile(user_id)
    except InvalidId as exc:
        messages.error(request, f"Not reverted: {exc}")
        return redirect("profiles")
    now = {name: current.section(name).summary for name in PROFILE_SECTIONS}
    diffs = [
        (name, diff_lines(now[name], old.get(name, ""))) for name in PROFILE_SECTIONS if now[name] != old.get(name, "")
    ]
    version = data["revision"]
    asked = confirm_first(
        request,
        question=f"Revert {user_id}'s profile to version {version}?",
        button=f"Revert to version {version}",
        cancel=page,
        extra={"diffs": diffs},
    )
    if asked:
        return asked
    reason = data.get("reason") or f"revert to version {version}"
    try:
        reverted = revert_profile(
            user_id, version, actor=actor_of(request), reason=reason, expected_revision=data["current"]
        )
    except RevisionConflict:
        messages.error(request, "Not reverted: the profile changed since you opened it. Look at it again.")
        return redirect(page)
    except UnknownRevision:
        messages.error(request, f"Not reverted: {user_id} has no version {version}.")
        return redirect(page)
    if not reverted.sections:
        messages.info(request, f"Nothing to revert: the text is already that of version {version}.")
        return redirect(page)
    messages.success(request, f"Reverted to version {version} (written as revision {reverted.profile.revision}).")
    return redirect(page)
