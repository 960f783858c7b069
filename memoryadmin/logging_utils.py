"""Structured logs: one JSON object per line, and one event per extraction run and per
curation action.

- ``log_event(logger, "event_name", **fields)`` logs an event with structured fields;
  the JSON formatter puts them at the top level of the line, the plain formatter
  appends them as ``key=value``.
- ``LOG_FORMAT=json`` switches the console handler to :class:`JsonFormatter`.
- Every finished ``ExtractionRun`` and every ``AuditEvent`` (the record each curation
  action already writes) is logged by the signal receivers below, so the code that
  creates them needs no logging of its own.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger("memory.events")

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


def log_event(logger: logging.Logger, event: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log `event` with `fields` kept as structured data (not formatted into the text)."""
    logger.log(level, event, extra={"event": event, "fields": fields})


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    data = dict(getattr(record, "fields", None) or {})
    for key, value in record.__dict__.items():
        if key not in _STANDARD and key not in ("fields", "event") and not key.startswith("_"):
            data.setdefault(key, value)
    return data


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "event"|"msg", …fields, "exc"}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
        }
        event = getattr(record, "event", None)
        if event:
            data["event"] = event
        else:
            data["msg"] = record.getMessage()
        for key, value in _fields(record).items():
            data.setdefault(key, value)
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, default=str)


class PlainFormatter(logging.Formatter):
    """The plain format with an event's fields appended as ``key=value``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = getattr(record, "fields", None)
        if fields:
            text += " " + " ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in fields.items())
        return text


# --- events of the write side, from the rows it already records --------------------------


def _run_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    if instance.status == "running" or kwargs.get("raw"):
        return  # raw: a run restored by an import or loaddata, not one that just finished
    level = logging.WARNING if instance.status == "failed" else logging.INFO
    if not log.isEnabledFor(level):
        return  # no counting query for an event nobody logs
    from facts.models import Candidate

    verdicts = dict(
        Candidate.objects.filter(run_id=instance.pk)
        .values_list("verdict")
        .annotate(n=_count())
        .values_list("verdict", "n")
    )
    log_event(
        log,
        "extraction_run",
        level=level,
        run_id=instance.pk,
        status=instance.status,
        user_id=instance.user_id,
        agent_name=instance.agent_name,
        thread_id=instance.thread_id,
        project_id=instance.project_id,
        replay=instance.replay,
        model=instance.model_name,
        rows=len(instance.filtered_rows or []),
        accepted=verdicts.get("accepted", 0),
        rejected=verdicts.get("rejected", 0),
        duration_ms=round(instance.duration_ms, 1) if instance.duration_ms is not None else None,
        model_ms=round(instance.model_ms, 1) if instance.model_ms is not None else None,
        prompt_tokens=instance.prompt_tokens,
        completion_tokens=instance.completion_tokens,
        error=instance.error[:500] if instance.error else "",
    )


def _count() -> Any:
    from django.db.models import Count

    return Count("id")


def _audit_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    if not created:
        return
    log_event(
        log,
        "curation",
        action=instance.action,
        actor=instance.actor,
        user_id=instance.user_id,
        agent_name=instance.agent_name,
        target=instance.target,
        reason=instance.reason[:500],
        audit_id=instance.pk,
    )


def connect() -> None:
    """Called from `MemoryAdminConfig.ready`."""
    from django.db.models.signals import post_save

    post_save.connect(_run_saved, sender="facts.ExtractionRun", dispatch_uid="log-extraction-run")
    post_save.connect(_audit_saved, sender="facts.AuditEvent", dispatch_uid="log-curation")
