"""API keys for agents. Stored hashed; the plain key is shown once."""

from __future__ import annotations

import hashlib
import secrets

from django.db import models
from django.utils import timezone


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiKey(models.Model):
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, help_text="First characters, to recognise a key")
    key_hash = models.CharField(max_length=64, unique=True)
    allowed_agents = models.JSONField(default=list, blank=True, help_text="Empty: every agent")
    rate_limit_per_minute = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150, blank=True, default="")
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(cls, name: str, *, allowed_agents: list[str] | None = None, created_by: str = "") -> tuple[ApiKey, str]:
        raw = "mem_" + secrets.token_urlsafe(32)
        key = cls.objects.create(
            name=name,
            prefix=raw[:12],
            key_hash=hash_key(raw),
            allowed_agents=allowed_agents or [],
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
    clean = models.BooleanField(default=True)
    files = models.PositiveIntegerField(default=0, help_text="cards in the mirror after the check")
    report = models.JSONField(default=dict, help_text="memoryadmin.rebuild.CheckReport.as_dict(), lists trimmed")
    counts = models.JSONField(default=dict, help_text="{part: {missing, extra, changed}} and unreadable")
    duration_s = models.FloatField(null=True, blank=True)

    class Meta:
        # overview and index console: the latest check
        indexes = [models.Index(fields=["-created_at"], name="drift_recent")]
