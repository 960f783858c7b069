"""Read-side settings and history. The FTS5 index itself is not a Django model: it lives
in its own SQLite file under MEMORY_ROOT/.retrieval/ and is rebuilt from the files."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AgentSettings(models.Model):
    """Per-agent context budgets, editable in the context preview."""

    agent_name = models.CharField(max_length=64, unique=True)
    budget = models.PositiveIntegerField(default=2000)
    correction_budget = models.PositiveIntegerField(default=500)
    top_n = models.PositiveIntegerField(default=50)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.agent_name


class GoldenQuery(models.Model):
    """A saved search whose expected top results are re-checked after edits."""

    user_id = models.CharField(max_length=200)
    agent_name = models.CharField(max_length=64)
    project_id = models.CharField(max_length=200, blank=True, default="")
    query = models.CharField(max_length=500)
    expected_ids = models.JSONField(default=list)
    last_checked_at = models.DateTimeField(null=True, blank=True)
    last_passed = models.BooleanField(null=True, blank=True)
    last_result_ids = models.JSONField(default=list, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["agent_name"], name="golden_agent")]


class IndexRebuild(models.Model):
    """One rebuild of the mirror and index from the files, with live progress."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    requested_by = models.CharField(max_length=150, blank=True, default="")
    # The step under way (`memoryadmin.rebuild.Phase`: files, mirror, embedding, index,
    # catch-up); `done` of `total` counts the files read, then the cards embedded.
    phase = models.CharField(max_length=16, blank=True, default="")
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    cards = models.PositiveIntegerField(default=0)
    profiles = models.PositiveIntegerField(default=0)
    unreadable = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_s = models.FloatField(null=True, blank=True)
