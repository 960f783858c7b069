"""API keys for agents. Stored hashed; the plain key is shown once."""

from __future__ import annotations

import functools
import hashlib
import re
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiKey(models.Model):
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, help_text="First characters, to recognise a key")
    key_hash = models.CharField(max_length=64, unique=True)
    allowed_agents = models.JSONField(default=list, blank=True, help_text="Empty: every agent")
    # Tenant scoping: patterns of user ids, `*` matching any run of characters ("acme:*").
    allowed_users = models.JSONField(default=list, blank=True, help_text="Empty: every user")
    rate_limit_per_minute = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150, blank=True, default="")
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(
        cls,
        name: str,
        *,
        allowed_agents: list[str] | None = None,
        allowed_users: list[str] | None = None,
        created_by: str = "",
    ) -> tuple[ApiKey, str]:
        raw = "mem_" + secrets.token_urlsafe(32)
        key = cls.objects.create(
            name=name,
            prefix=raw[:12],
            key_hash=hash_key(raw),
            allowed_agents=allowed_agents or [],
            allowed_users=allowed_users or [],
            created_by=created_by,
        )
        return key, raw

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def revoke(self) -> None:
        self.revoked_at = timezone.now()
        self.save(update_fields=["revoked_at"])

    def allows(self, agent_name: str) -> bool:
        return not self.allowed_agents or agent_name in self.allowed_agents

    def allows_user(self, user_id: str) -> bool:
        """Whether the key may act for `user_id` (the id exactly as the agent sends it)."""
        return not self.allowed_users or any(user_pattern(p).fullmatch(user_id) for p in self.allowed_users)


@functools.lru_cache(maxsize=1024)
def user_pattern(pattern: str) -> re.Pattern[str]:
    """``acme:*`` → any id starting with ``acme:``. Only ``*`` is special (any run of
    characters, ``:`` and ``/`` included); everything else matches itself, case-sensitively,
    as user ids are compared everywhere else."""
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


def check_user_pattern(pattern: str) -> str:
    """A pattern as typed, or ValueError saying what is wrong with it."""
    pattern = pattern.strip()
    if not pattern:
        raise ValueError("a user pattern is empty")
    if len(pattern) > 200:
        raise ValueError("a user pattern is longer than 200 characters")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in pattern):
        raise ValueError("a user pattern must not contain control characters")
    return pattern


class DriftCheck(models.Model):
    """The last comparison of files, mirror and index, kept so that the overview can show
    index health without scanning every file on each request."""

    class Status(models.TextChoices):
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    created_at = models.DateTimeField(auto_now_add=True)
    requested_by = models.CharField(max_length=150, blank=True, default="")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    error = models.TextField(blank=True, default="")
    # Shadows Model.clean(), never called on this model; renaming it needs a migration.
    clean = models.BooleanField(default=True)  # type: ignore[assignment]
    files = models.PositiveIntegerField(default=0, help_text="cards in the mirror after the check")
    report = models.JSONField(default=dict, help_text="memoryadmin.rebuild.CheckReport.as_dict(), lists trimmed")
    counts = models.JSONField(default=dict, help_text="{part: {missing, extra, changed}} and unreadable")
    duration_s = models.FloatField(null=True, blank=True)

    class Meta:
        # overview and index console: the latest check
        indexes = [models.Index(fields=["-created_at"], name="drift_recent")]


def parse_user_patterns(text: str) -> list[str]:
    """``"acme:*, bob"`` → ``["acme:*", "bob"]`` (sorted, no repeats); ValueError if one is bad."""
    return sorted({check_user_pattern(item) for item in text.split(",") if item.strip()})


class RateCounter(models.Model):
    """One fixed window's request count of an API key (kind "key") or failed keys of a
    client address (kind "fail"), used when the database is PostgreSQL so that every
    machine counts against the same limit (`memoryadmin.ratelimit`)."""

    kind = models.CharField(max_length=8)
    name = models.CharField(max_length=64)
    window = models.BigIntegerField()
    n = models.IntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["kind", "name", "window"], name="ratecounter_unique")]


class SetPasswordLink(models.Model):
    """The one live set-password link of a dashboard account (`memoryadmin.accounts`).

    The link's token signs `nonce`, so a new link (a new nonce) revokes the earlier one;
    the row goes when the password is set or the account is deactivated, and a link
    without its row never works. Only the nonce is kept, never the token."""

    account = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="set_password_link")
    nonce = models.CharField(max_length=32)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=150, blank=True, default="")
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"set-password link of account {self.account_id} until {self.expires_at:%Y-%m-%d %H:%M}"

    @property
    def live(self) -> bool:
        return self.expires_at > timezone.now()
