"""Batch ingestion for backfills and demos: one turn per JSON line, run synchronously."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from facts.extraction import ExtractionError
from facts.ingestion import REPLAY_BATCH, CleanTurn, TurnRejected, clean_turn, run_replays, run_turns_now

FIELDS = {"user_id", "agent_name", "thread_id", "project_id", "messages", "model_output"}

Outcome = dict[str, Any] | ValueError


def parse_line(text: str) -> tuple[CleanTurn, dict[str, Any] | None]:
    """A line's validated turn and its model output (None: call the model); ValueError says what is wrong."""
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
        turn = clean_turn(
            user_id=data.get("user_id"),
            agent_name=data.get("agent_name"),
            thread_id=data.get("thread_id"),
            project_id=data.get("project_id"),
            messages=data.get("messages"),
        )
    except TurnRejected as exc:
        raise ValueError(str(exc)) from None
    return turn, data.get("model_output")


def ingest_lines(lines: Iterable[tuple[int, str]], *, batch_size: int = REPLAY_BATCH) -> Iterator[tuple[int, Outcome]]:
    """Run numbered JSONL lines through the pipeline; yield each line's outcome in order.

    Replayed lines (with `model_output`) are run in group commits of up to `batch_size`
    turns (`facts.ingestion.run_replays`); a line that calls the model runs on its own,
    after the replays before it. A bad line's outcome is its ValueError.
    """
    waiting: list[tuple[int, Outcome | None]] = []  # in input order; None: in the group
    group: list[tuple[CleanTurn, dict[str, Any]]] = []

    def flush() -> Iterator[tuple[int, Outcome]]:
        results = iter(run_replays(group, batch_size=batch_size)) if group else iter(())
        for number, outcome in waiting:
            yield number, outcome if outcome is not None else next(results).as_dict()
        waiting.clear()
        group.clear()

    for number, text in lines:
        try:
            turn, output = parse_line(text)
        except ValueError as exc:
            waiting.append((number, exc))
            continue
        if output is not None:
            waiting.append((number, None))
            group.append((turn, output))
            if len(group) >= batch_size:
                yield from flush()
            continue
        yield from flush()
        try:
            result = run_turns_now(
                user_id=turn.user_id,
                agent_name=turn.agent_name,
                thread_id=turn.thread_id,
                project_id=turn.project_id,
                messages=turn.messages,
            )
        except ExtractionError as exc:
            yield number, ValueError(f"extraction failed: {exc}")
        else:
            yield number, result.as_dict()
    yield from flush()


class Command(BaseCommand):
    help = (
        "Ingest FILE.jsonl: one turn per line {user_id, agent_name, thread_id, project_id?, messages, "
        "model_output?}. With model_output the model is not called (replay). Same pipeline and gate as the API."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--json", action="store_true", help="Print one JSON object per input line.")
        parser.add_argument(
            "--batch-size",
            type=int,
            default=REPLAY_BATCH,
            help=(
                f"Replayed turns written per group commit (default {REPLAY_BATCH}): one batch of fsynced "
                "files and one transaction for all of them. 1 commits each turn on its own."
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"]
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
        numbered = [(number, line) for number, line in enumerate(lines, start=1) if line.strip()]
        failed = 0
        for number, outcome in ingest_lines(numbered, batch_size=options["batch_size"]):
            if isinstance(outcome, ValueError):
                failed += 1
                self.stderr.write(f"line {number}: {outcome} (skipped)")
                if options["json"]:
                    self.stdout.write(json.dumps({"line": number, "error": str(outcome)}, ensure_ascii=False))
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
            raise CommandError(f"{failed} of {len(numbered)} line(s) failed")
