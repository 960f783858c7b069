"""Set-password links of the dashboard's accounts: one live link per account.

An account is created without a password, or needs a new one; an admin gives its owner
a link (the Team page). Django's password-reset tokens alone cannot be revoked — every
token stays valid until the password changes or it times out — so each link's token
also signs the nonce of the account's `SetPasswordLink` row:

- a new link replaces the row: the earlier link stops working at once;
- setting the password, or deactivating the account, deletes the row: the link is dead,
  and stays dead when the account is reactivated;
- every link expires (`PASSWORD_RESET_TIMEOUT`), and its page says when.

Issuing, revoking and using a link are audited (action ``team``: ``link``,
``link_revoked``, ``password_set``).
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.auth.tokens import PasswordResetTokenGenerator
from django.db import transaction
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from facts import audit
from facts.models import AuditEvent

from .models import SetPasswordLink


def _link_of(account: User) -> SetPasswordLink | None:
    return SetPasswordLink.objects.filter(account_id=account.pk).first()


class LinkTokens(PasswordResetTokenGenerator):
    """Django's tokens, also signing the account's link nonce and active state."""

    key_salt = "memoryadmin.accounts.LinkTokens"

    def _make_hash_value(self, user: User, timestamp: int) -> str:
        link = _link_of(user)
        nonce = link.nonce if link is not None else ""
        return f"{super()._make_hash_value(user, timestamp)}{nonce}{int(bool(user.is_active))}"

    def check_token(self, user: User | None, token: str | None) -> bool:
        if user is None or not user.is_active:
            return False
        link = _link_of(user)
        if link is None or not link.live:
            return False
        return super().check_token(user, token)


tokens = LinkTokens()


def timeout() -> timedelta:
    return timedelta(seconds=int(settings.PASSWORD_RESET_TIMEOUT))


def issue(account: User, *, actor: str, audit_it: bool = True) -> tuple[str, str, datetime, bool]:
    """A new link for `account`, revoking any earlier one: (uidb64, token, expires_at,
    whether a live link was revoked)."""
    now = timezone.now()
    with transaction.atomic():
        revoked = _revoke(account, actor=actor, why="new link")
        SetPasswordLink.objects.create(
            account_id=account.pk,
            nonce=secrets.token_hex(16),
            created_at=now,
            created_by=actor[:150],
            expires_at=now + timeout(),
        )
        if audit_it:
            audit.record(actor, AuditEvent.Action.TEAM, target=account.get_username(), change="link")
    uid = urlsafe_base64_encode(force_bytes(account.pk))
    return uid, tokens.make_token(account), now + timeout(), revoked


def _revoke(account: User, *, actor: str, why: str) -> bool:
    link = _link_of(account)
    if link is None:
        return False
    link.delete()
    if not link.live:
        return False  # it had expired already: nothing to revoke
    audit.record(actor, AuditEvent.Action.TEAM, target=account.get_username(), change="link_revoked", why=why)
    return True


def revoke(account: User, *, actor: str, why: str) -> bool:
    """Kill the account's link (deactivation); True when a live one was revoked."""
    with transaction.atomic():
        return _revoke(account, actor=actor, why=why)


def used(account: User) -> None:
    """The owner set the password through the link: the link is spent."""
    with transaction.atomic():
        SetPasswordLink.objects.filter(account_id=account.pk).delete()
        audit.record(
            account.get_username(), AuditEvent.Action.TEAM, target=account.get_username(), change="password_set"
        )


def live_link(account: Any) -> SetPasswordLink | None:
    link = _link_of(account)
    return link if link is not None and link.live else None
