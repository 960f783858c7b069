"""Batch ingestion for backfills and demos: one turn per JSON line, run synchronously."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from facts.extraction import ExtractionError
from facts.ingestion import TurnRejected, run_turns_now

FIELDS = {"user_id", "agent_name", "thread_id", "project_id", "messages", "model_output"}


def ingest_line(text: str) -> dict[str, Any]:
    """Run one JSONL line through the pipeline; raise ValueError with a readable message."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ValueError("a line must be a JSON object")
    unknown = sorted(set(data) - FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(unknown)}")
    if "model_output" in data and not isinstance(data["model_output"], dict):
        raise ValueError("model_output: must be a MemoryUpdate object")
    try:
        result = run_turns_now(
            user_id=data.get("user_id"),
            agent_name=data.get("agent_name"),
            thread_id=data.get("thread_id"),
            project_id=data.get("project_id"),
            messages=data.get("messages"),
            model_output=data.get("model_output"),
        )
    except TurnRejected as exc:
        raise ValueError(str(exc)) from None
    except ExtractionError as exc:
        raise ValueError(f"extraction failed: {exc}") from None
    return result.as_dict()


class Command(BaseCommand):
    help = (
        "Ingest FILE.jsonl: one turn per line {user_id, agent_name, thread_id, project_id?, messages, "
        "model_output?}. With model_output the model is not called (replay). Same pipeline and gate as the API."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--json", action="store_true", help="Print one JSON object per input line.")

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"]
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
        failed = total = 0
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            total += 1
            try:
                outcome = ingest_line(line)
            except ValueError as exc:
                failed += 1
                self.stderr.write(f"line {number}: {exc} (skipped)")
                if options["json"]:
                    self.stdout.write(json.dumps({"line": number, "error": str(exc)}, ensure_ascii=False))
                continue
            if options["json"]:
                self.stdout.write(json.dumps(outcome, ensure_ascii=False))
            else:
                verdicts = [c["verdict"] for c in outcome["candidates"]]
                self.stdout.write(
                    f"line {number}: run {outcome['run_id']}, roles {outcome['roles']}, "
                    f"{len(verdicts)} candidate(s), {verdicts.count('accepted')} accepted, {outcome['saved']} saved"
                )
        if failed:
            raise CommandError(f"{failed} of {total} line(s) failed")
