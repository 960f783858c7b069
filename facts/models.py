"""Database models of the write side.

``FactCard`` and ``ProfileSection`` mirror the files and are rebuilt from them by
``reindex``; everything else (turns, runs, candidates, revisions, audit) is history
that lives only here.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from facts.enums import CardStatus, Category, SourceKind, choices
from facts.storage.store import Bucket


class FactCard(models.Model):
    """Mirror of one fact card file. Never written except by `facts.storage.writer`."""

    id = models.CharField(primary_key=True, max_length=17)
    key = models.CharField(max_length=120)
    category = models.CharField(max_length=16, choices=choices(Category))
    status = models.CharField(max_length=16, choices=choices(CardStatus), default=CardStatus.ACTIVE)
    confidence = models.FloatField()
    # Raw ids as the agent sent them; the bucket is user × agent or a project.
    user_id = models.CharField(max_length=200, blank=True, default="")
    agent_name = models.CharField(max_length=64, blank=True, default="")
    project_id = models.CharField(max_length=200, blank=True, default="")
    content = models.TextField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    last_confirmed_at = models.DateTimeField(null=True, blank=True)
    confirmation_count = models.PositiveIntegerField(default=0)
    expires_at = models.DateTimeField(null=True, blank=True)
    review_by = models.DateTimeField(null=True, blank=True)
    superseded_by = models.CharField(max_length=17, blank=True, default="")
    source_kind = models.CharField(max_length=16, choices=choices(SourceKind), default=SourceKind.MANUAL)
    source_run_id = models.CharField(max_length=64, blank=True, default="")
    source_thread_id = models.CharField(max_length=200, blank=True, default="")
    source_message_id = models.CharField(max_length=200, blank=True, default="")
    evidence_text = models.TextField(blank=True, default="")
    revision = models.PositiveIntegerField(default=1)
    # Relative to MEMORY_ROOT, and the SHA-256 of the file's text: what `reindex --check`
    # compares to find hand edits.
    path = models.CharField(max_length=500)
    file_sha256 = models.CharField(max_length=64)

    class Meta:
        indexes = [
            # facts list / render: the cards of one user × agent by status
            models.Index(fields=["user_id", "agent_name", "status"], name="fact_bucket_status"),
            # render with a project, project facts list
            models.Index(fields=["project_id", "status"], name="fact_project_status"),
            # key replacement: the active card with the same key in a bucket
            models.Index(fields=["user_id", "agent_name", "key"], name="fact_bucket_key"),
            # overview counts
            models.Index(fields=["status"], name="fact_status"),
            # "forget this conversation"
            models.Index(fields=["source_thread_id"], name="fact_thread"),
            # /context and /search: is this agent known at all (api_service.agent_known)
            models.Index(fields=["agent_name"], name="fact_agent"),
            # facts list sorted by recency
            models.Index(fields=["-updated_at"], name="fact_updated"),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.key}"

    @property
    def bucket(self) -> Bucket:
        """The folder that holds this row's card file: a user × agent's, or a project's."""
        if self.user_id:
            return Bucket(user_id=self.user_id, agent_name=self.agent_name)
        return Bucket(project_id=self.project_id)


class FactRevision(models.Model):
    """Every version a card has had, with who changed it and why (for diffs and revert)."""

    fact_id = models.CharField(max_length=17)
    revision = models.PositiveIntegerField()
    text = models.TextField(help_text="The card file as written")
    actor = models.CharField(max_length=150)
    reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["fact_id", "revision"], name="fact_revision_unique"),
        ]
        ordering = ["fact_id", "revision"]


class FactUsage(models.Model):
    """How often a card was injected or returned by search. Kept apart from the mirror so
    that a rebuild from the files does not reset it."""

    fact_id = models.CharField(primary_key=True, max_length=17)
    injected_count = models.PositiveIntegerField(default=0)
    searched_count = models.PositiveIntegerField(default=0)
    last_injected_at = models.DateTimeField(null=True, blank=True)
    last_searched_at = models.DateTimeField(null=True, blank=True)


class ProfileSection(models.Model):
    """Mirror of one section of a user's ``memory.json``."""

    class Group(models.TextChoices):
        USER = "user"
        HISTORY = "history"

    user_id = models.CharField(max_length=200)
    group = models.CharField(max_length=16, choices=Group.choices)
    name = models.CharField(max_length=32)
    summary = models.TextField(blank=True, default="")
    updated_at = models.DateTimeField(null=True, blank=True)
    source = models.JSONField(null=True, blank=True)
    revision = models.PositiveIntegerField(default=0, help_text="memory.json revision")
    path = models.CharField(max_length=500)
    file_sha256 = models.CharField(max_length=64)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user_id", "name"], name="profile_section_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}:{self.name}"


class ProfileRevision(models.Model):
    """Every version of a user's memory.json."""

    user_id = models.CharField(max_length=200)
    revision = models.PositiveIntegerField()
    document = models.JSONField()
    actor = models.CharField(max_length=150)
    reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user_id", "revision"], name="profile_revision_unique"),
        ]
        ordering = ["user_id", "revision"]


class Turn(models.Model):
    """A batch of messages an agent sent, stored before the API answers."""

    class Status(models.TextChoices):
        PENDING = "pending"
        PROCESSING = "processing"
        DONE = "done"
        SKIPPED = "skipped"
        FAILED = "failed"

    user_id = models.CharField(max_length=200)
    agent_name = models.CharField(max_length=64)
    thread_id = models.CharField(max_length=200)
    project_id = models.CharField(max_length=200, blank=True, default="")
    messages = models.JSONField(help_text="Raw messages as received")
    message_ids = models.JSONField(default=list)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    flush = models.BooleanField(default=False, help_text="Processed without debounce")
    received_at = models.DateTimeField(auto_now_add=True)
    process_after = models.DateTimeField(null=True, blank=True)
    processed_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    run = models.ForeignKey("ExtractionRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="turns")
    # The claim of the worker processing it (facts/intake/claims.py): who, and until when
    # unless renewed. A processing turn whose lease has passed is stuck: taken over.
    # (Both are looked up with status=processing, which the indexes below lead with.)
    claimed_by = models.CharField(max_length=32, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # the worker: pending turns of one (user, agent, thread)
            models.Index(fields=["status", "user_id", "agent_name", "thread_id"], name="turn_pending_thread"),
            models.Index(fields=["status", "received_at"], name="turn_status_received"),
            # /context and /search: is this agent known at all (api_service.agent_known)
            models.Index(fields=["agent_name"], name="turn_agent"),
        ]


class ExtractedMessage(models.Model):
    """A message id that has been fed to extraction once: never again (flush + normal path)."""

    user_id = models.CharField(max_length=200)
    agent_name = models.CharField(max_length=64)
    thread_id = models.CharField(max_length=200)
    message_id = models.CharField(max_length=200)
    run = models.ForeignKey("ExtractionRun", null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user_id", "agent_name", "thread_id", "message_id"], name="extracted_message_unique"
            ),
        ]


class ExtractionRun(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        SKIPPED = "skipped"
        FAILED = "failed"

    class Extractor(models.TextChoices):
        LLM = "llm", "LLM"
        RULES = "rules", "Rules (built-in)"

    user_id = models.CharField(max_length=200)
    agent_name = models.CharField(max_length=64)
    thread_id = models.CharField(max_length=200, blank=True, default="")
    project_id = models.CharField(max_length=200, blank=True, default="")
    filtered_rows = models.JSONField(default=list, help_text="[{id, role, content}] after filtering")
    model_name = models.CharField(max_length=200, blank=True, default="")
    replay = models.BooleanField(default=False, help_text="model output supplied, model not called")
    # Blank for replays: nothing was called.
    extractor = models.CharField(max_length=16, choices=Extractor.choices, blank=True, default="")
    # What the model was sent, by reference (facts.judging.extraction.request_record: the rules'
    # version, profile section names, existing fact ids), so a failed or surprising run
    # can be read on its page; never stored facts' text (see request_record).
    request = models.JSONField(default=dict, blank=True)
    raw_output = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    error = models.TextField(blank=True, default="")
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    model_ms = models.FloatField(null=True, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    # The claim of its turns: a running run past its lease was abandoned by its worker.
    claimed_by = models.CharField(max_length=32, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    # What the gate judged under (facts.judging.backtest replays against these): the moment it
    # planned, under the buckets' locks, and the settings. Null on runs recorded before.
    judged_at = models.DateTimeField(null=True, blank=True)
    threshold = models.FloatField(null=True, blank=True)
    review_mode = models.CharField(max_length=8, blank=True, default="")

    class Meta:
        indexes = [
            models.Index(fields=["-started_at"], name="run_recent"),
            # the heartbeat's renewal (running runs of one claim) and the sweep (running
            # runs past their lease): never a scan of every run ever recorded
            models.Index(fields=["status", "claimed_by"], name="run_claim"),
            # the runs page filtered by user, or by status (failed runs), newest first
            models.Index(fields=["user_id", "-started_at"], name="run_user_recent"),
            models.Index(fields=["status", "-started_at"], name="run_status_recent"),
        ]


class Candidate(models.Model):
    """Everything the model proposed, with the gate's verdict and the review that followed."""

    class Kind(models.TextChoices):
        FACT = "fact"
        SUMMARY = "summary"
        CONFIRMATION = "confirmation"

    class Verdict(models.TextChoices):
        ACCEPTED = "accepted"
        REJECTED = "rejected"

    class ReviewState(models.TextChoices):
        NONE = "none", "Not reviewed"
        PENDING = "pending", "Waiting for review"
        APPROVED = "approved"
        DISMISSED = "dismissed"

    run = models.ForeignKey(ExtractionRun, on_delete=models.CASCADE, related_name="candidates")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    position = models.PositiveIntegerField(default=0, help_text="Index in the model's output")
    user_id = models.CharField(max_length=200)
    agent_name = models.CharField(max_length=64)
    thread_id = models.CharField(max_length=200, blank=True, default="")
    project_id = models.CharField(max_length=200, blank=True, default="")
    # The candidate's fields; blank where the model left them out or sent garbage.
    key = models.CharField(max_length=200, blank=True, default="")
    section = models.CharField(max_length=32, blank=True, default="")
    content = models.TextField(blank=True, default="")
    category = models.CharField(max_length=16, blank=True, default="")
    scope = models.CharField(max_length=16, blank=True, default="")
    durability = models.CharField(max_length=16, blank=True, default="")
    authority = models.CharField(max_length=16, blank=True, default="")
    confidence = models.FloatField(null=True, blank=True)
    evidence_message_id = models.CharField(max_length=200, blank=True, default="")
    evidence_text = models.TextField(blank=True, default="")
    raw = models.JSONField(null=True, blank=True, help_text="The candidate exactly as the model sent it")
    validation_error = models.TextField(blank=True, default="")
    verdict = models.CharField(max_length=16, choices=Verdict.choices)
    reasons = models.JSONField(default=list, help_text="Reason codes of every failed rule")
    review_state = models.CharField(max_length=16, choices=ReviewState.choices, default=ReviewState.NONE)
    reviewed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    reviewed_at = models.DateTimeField(null=True, blank=True)
    review_note = models.TextField(blank=True, default="")
    fact_id = models.CharField(max_length=17, blank=True, default="", help_text="The card it produced")
    created_at = models.DateTimeField(auto_now_add=True)
    # When its evidence message was said, if the turn said so (issue 35): the created_at
    # of the card it makes, now or when a reviewer approves it. Null: said when received.
    said_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # review queue: by verdict and state, newest first
            models.Index(fields=["verdict", "review_state", "-created_at"], name="cand_queue"),
            models.Index(fields=["user_id", "agent_name"], name="cand_bucket"),
            models.Index(fields=["-created_at"], name="cand_recent"),
        ]


class AuditEvent(models.Model):
    """Who did what to memory, when and why. Keeps that a deletion happened, not the content."""

    class Action(models.TextChoices):
        APPROVE = "approve"
        CORRECT = "correct"
        DISMISS = "dismiss"
        EXPIRE = "expire"
        RESTORE = "restore"
        REVIEW_BY = "review_by"
        REVERT = "revert"
        DELETE = "delete"
        FORGET_THREAD = "forget_thread"
        PROFILE_EDIT = "profile_edit"
        REBUILD = "rebuild"
        SETTINGS = "settings"
        API_KEY = "api_key"
        RESOLVE = "resolve"
        RETRY_TURNS = "retry_turns"
        ERASE = "erase"
        EXPORT = "export"
        IMPORT = "import"
        # A dashboard account created, its role changed, deactivated or given a new link.
        TEAM = "team"
        # A project given to a tenant or shared (facts/tenancy.py).
        PROJECT = "project"
        # A fact a curator wrote by hand (facts/curation/manual.py; its card's source kind is manual).
        ADD_FACT = "add_fact"

    actor = models.CharField(max_length=150)
    action = models.CharField(max_length=32, choices=Action.choices)
    user_id = models.CharField(max_length=200, blank=True, default="")
    agent_name = models.CharField(max_length=64, blank=True, default="")
    target = models.CharField(max_length=200, blank=True, default="", help_text="fact id, candidate id, …")
    reason = models.TextField(blank=True, default="")
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["-created_at"], name="audit_recent"),
            models.Index(fields=["action", "-created_at"], name="audit_action"),
        ]
        permissions = [
            ("curate_memory", "Can review candidates and curate facts and profiles"),
            ("administer_memory", "Can delete permanently, change settings and manage API keys"),
        ]


class Erasure(models.Model):
    """One erasure of a user (or of one agent, thread or project of theirs).

    The row is the durable "erasure in progress" marker: while it is `running`, turns
    and memory writes in its scope are refused, and an erasure killed half-way is found
    and finished by the next run (`facts.erasure.run.erase`). It names ids, never content.
    """

    class Status(models.TextChoices):
        RUNNING = "running"
        DONE = "done"

    user_id = models.CharField(max_length=200)
    agent_name = models.CharField(max_length=64, blank=True, default="")
    thread_id = models.CharField(max_length=200, blank=True, default="")
    project_id = models.CharField(max_length=200, blank=True, default="")
    actor = models.CharField(max_length=150)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    counts = models.JSONField(default=dict, blank=True, help_text="items erased per kind")
    ids = models.JSONField(default=dict, blank=True, help_text="ids erased per kind (lists capped), for the audit")
    # Recorded before the first card is deleted: a rerun after a kill no longer finds
    # the cards, but must still remove their revisions, usage and golden queries.
    fact_ids = models.JSONField(default=list, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # every turn and memory write asks whether an erasure is running for its user
            models.Index(fields=["status", "user_id"], name="erasure_running_user"),
        ]

    def __str__(self) -> str:
        return f"erasure {self.pk} of {self.user_id} ({self.status})"


class Injection(models.Model):
    """One context block or search answer served to an agent (`facts.injections`).

    Compact on purpose: ids, revisions, a token count and the SHA-256 of the text, never
    the text; what the agent read is rebuilt from the card revisions. Pruned after
    MEMORY_INJECTION_LOG_DAYS by the worker."""

    class Kind(models.TextChoices):
        CONTEXT = "context"
        SEARCH = "search"

    served_at = models.DateTimeField()
    user_id = models.CharField(max_length=200)
    agent_name = models.CharField(max_length=64, blank=True, default="")
    project_id = models.CharField(max_length=200, blank=True, default="")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    mode = models.CharField(max_length=8, blank=True, default="", help_text="context mode: auto | tool")
    door = models.CharField(max_length=8, blank=True, default="", help_text="api | mcp | local")
    tokens = models.PositiveIntegerField(default=0)
    text_sha256 = models.CharField(max_length=64)

    class Meta:
        indexes = [
            # "what the agent saw at T": the latest of one user (× agent) before T
            models.Index(fields=["user_id", "agent_name", "-served_at"], name="inj_user_time"),
            # the worker's retention prune
            models.Index(fields=["served_at"], name="inj_served"),
        ]


class InjectedFact(models.Model):
    """A card (at a revision) that one injection contained."""

    injection = models.ForeignKey(Injection, on_delete=models.CASCADE, related_name="facts")
    fact_id = models.CharField(max_length=17)
    revision = models.PositiveIntegerField(null=True, blank=True)
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        indexes = [
            # the fact page: when and where a card was last injected
            models.Index(fields=["fact_id", "injection"], name="injfact_fact"),
        ]


class GateSettings(models.Model):
    """The gate's confidence threshold as an administrator set it from the dashboard
    (one row; none: MEMORY_CONFIDENCE_THRESHOLD). Every change is audited."""

    threshold = models.FloatField()
    updated_by = models.CharField(max_length=150)
    updated_at = models.DateTimeField(auto_now=True)


class CardChange(models.Model):
    """The ordered log of card writes other machines follow (`retrieval.follow`): one row
    per card written or deleted, in the mirror's transaction, so a committed mirror
    change is never missing from it. Kept only when ``MEMORY_CHANGE_LOG`` is on (the
    default on PostgreSQL); rows older than an hour are pruned by the followers."""

    id = models.BigAutoField(primary_key=True)
    fact_id = models.CharField(max_length=17)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
