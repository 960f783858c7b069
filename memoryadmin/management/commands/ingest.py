"""Batch ingestion for backfills and demos: one turn per JSON line, run synchronously.

A project command (not `facts`'): with several workers it warms the read side's
tokenizers before forking (`retrieval.warmup.warm`), and the write side never imports
the read side."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from facts import tenancy
from facts.intake.turns import CleanTurn, TurnRejected, clean_turn
from facts.judging.extraction import ExtractionError
from facts.judging.pipeline import REPLAY_BATCH, run_replays, run_turns_now
from retrieval.warmup import warm

FIELDS = {"user_id", "agent_name", "thread_id", "project_id", "messages", "created_at", "model_output"}

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
            created_at=data.get("created_at"),
        )
        # A project of another tenant is refused here as at every other door.
        tenancy.check(turn.user_id, turn.project_id)
    except TurnRejected as exc:
        raise ValueError(str(exc)) from None
    return turn, data.get("model_output")


Parsed = tuple[CleanTurn, dict[str, Any] | None] | ValueError


def ingest_lines(
    lines: Iterable[tuple[int, str]], *, batch_size: int = REPLAY_BATCH, workers: int = 1
) -> Iterator[tuple[int, Outcome]]:
    """Run numbered JSONL lines through the pipeline; yield each line's outcome in order.

    Replayed lines (with `model_output`) are run in group commits of up to `batch_size`
    turns (`facts.judging.pipeline.run_replays`); a line that calls the model runs on its own,
    after the replays before it. A bad line's outcome is its ValueError. `workers` > 1
    forks that many processes, each taking whole users (see `_split`).
    """
    parsed = [(number, _parsed(text)) for number, text in lines]
    shares = _split(parsed, workers)
    if len(shares) <= 1:
        yield from _run(parsed, batch_size)
    else:
        yield from _run_forked(parsed, shares, batch_size)


def _parsed(text: str) -> Parsed:
    try:
        return parse_line(text)
    except ValueError as exc:
        return exc


def _run(items: Iterable[tuple[int, Parsed]], batch_size: int) -> Iterator[tuple[int, Outcome]]:
    waiting: list[tuple[int, Outcome | None]] = []  # in input order; None: in the group
    group: list[tuple[CleanTurn, dict[str, Any]]] = []

    def flush() -> Iterator[tuple[int, Outcome]]:
        results = iter(run_replays(group, batch_size=batch_size)) if group else iter(())
        for number, outcome in waiting:
            yield number, outcome if outcome is not None else next(results).as_dict()
        waiting.clear()
        group.clear()

    for number, item in items:
        if isinstance(item, ValueError):
            waiting.append((number, item))
            continue
        turn, output = item
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


def _split(parsed: list[tuple[int, Parsed]], workers: int) -> list[list[int]]:
    """The valid lines' positions, shared out between `workers` processes.

    Lines that name the same user or the same project always go to the same process, in
    file order, so whatever one line decides for a bucket (a key replaced, a content
    already saved) the next line of that bucket sees, exactly as in a single process.
    Groups of lines connected that way are dealt out largest first to the least loaded.
    """
    if workers <= 1:
        return [[i for i, (_n, item) in enumerate(parsed) if not isinstance(item, ValueError)]]
    owner: dict[str, str] = {}

    def find(key: str) -> str:
        root = key
        while owner.setdefault(root, root) != root:
            root = owner[root]
        while owner[key] != root:  # path compression
            owner[key], key = root, owner[key]
        return root

    keys: list[tuple[int, str]] = []
    for index, (_number, item) in enumerate(parsed):
        if isinstance(item, ValueError):
            continue
        turn = item[0]
        user = find("user:" + turn.user_id)
        if turn.project_id:
            owner[find("project:" + turn.project_id)] = user
        keys.append((index, "user:" + turn.user_id))
    components: dict[str, list[int]] = {}
    for index, key in keys:
        components.setdefault(find(key), []).append(index)
    shares: list[list[int]] = [[] for _ in range(min(workers, len(components)))]
    for lines in sorted(components.values(), key=len, reverse=True):
        min(shares, key=len).extend(lines)
    return [sorted(share) for share in shares if share]


def _run_forked(
    parsed: list[tuple[int, Parsed]], shares: list[list[int]], batch_size: int
) -> Iterator[tuple[int, Outcome]]:
    """Each share in a forked child; outcomes come back over a queue, yielded in line order."""
    import multiprocessing
    import queue as queue_module
    import traceback

    from django.db import connections

    warm()  # jieba's dictionary, loaded once and shared with the children
    connections.close_all()  # each child opens its own
    context = multiprocessing.get_context("fork")
    queue = context.Queue()

    def child(share: list[int]) -> None:
        try:
            for number, outcome in _run((parsed[i] for i in share), batch_size):
                queue.put((number, outcome if isinstance(outcome, dict) else str(outcome)))
        except BaseException:
            queue.put((None, traceback.format_exc()))
        finally:
            connections.close_all()
            queue.put((None, None))

    processes = [context.Process(target=child, args=(share,), daemon=True) for share in shares]
    for process in processes:
        process.start()
    done: dict[int, Outcome] = {n: item for n, item in parsed if isinstance(item, ValueError)}
    order = [number for number, _item in parsed]
    position, running, crashes = 0, len(processes), []
    while running:
        try:
            number, outcome = queue.get(timeout=1)
        except queue_module.Empty:
            if not any(p.is_alive() for p in processes):  # killed without a word (OOM)
                crashes.append(f"a worker process died (exit codes {[p.exitcode for p in processes]})")
                break
            continue
        if number is None:
            if outcome is None:
                running -= 1
            else:
                crashes.append(outcome)
            continue
        done[number] = outcome if isinstance(outcome, dict) else ValueError(outcome)
        while position < len(order) and order[position] in done:
            yield order[position], done.pop(order[position])
            position += 1
    for process in processes:
        process.join()
    if crashes:
        raise CommandError("a worker failed; the lines it had not finished were not ingested:\n" + crashes[0])
    while position < len(order):  # the bad lines after the last good one
        yield order[position], done.pop(order[position])
        position += 1


class Command(BaseCommand):
    help = (
        "Ingest FILE.jsonl: one turn per line {user_id, agent_name, thread_id, project_id?, messages, "
        "created_at?, model_output?}. created_at (ISO 8601 with its offset; each message may carry its own) "
        "dates the facts taken from it. With model_output the model is not called (replay). Same pipeline "
        "and gate as the API."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--json", action="store_true", help="Print one JSON object per input line.")
        parser.add_argument(
            "--workers",
            type=int,
            default=1,
            help=(
                "Processes to ingest with (default 1). Each takes whole users, with their "
                "projects, so every bucket still sees its lines in file order."
            ),
        )
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
        if options["workers"] < 1:
            raise CommandError("--workers must be at least 1")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
        numbered = [(number, line) for number, line in enumerate(lines, start=1) if line.strip()]
        failed = 0
        for number, outcome in ingest_lines(numbered, batch_size=options["batch_size"], workers=options["workers"]):
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
