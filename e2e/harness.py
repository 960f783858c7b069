"""`make e2e-llm`: run the real write path against a real model and check what it stored.

Started by `e2e/run.sh` once the model server is up, with the product's own settings in
the environment (``MEMORY_LLM_BASE_URL``, ``MEMORY_LLM_MODEL``, ``MEMORY_LLM_METHOD``,
a throwaway ``VAR_DIR``). It feeds each scripted conversation through ingestion exactly
as an agent's finished turn would be processed, then reads back the DB rows the review
queue shows and the memory files, prints the report and exits non-zero on any problem.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from e2e.report import (
    Call,
    CandidateRow,
    Message,
    StoredMemory,
    check_calls,
    check_evidence,
    check_queue,
    render,
    summarize,
)

HERE = Path(__file__).resolve().parent
CONVERSATIONS = HERE / "conversations.json"


def load_conversations(path: Path = CONVERSATIONS) -> list[dict[str, Any]]:
    return json.loads(path.read_text(encoding="utf-8"))


def as_messages(conversation: dict[str, Any]) -> list[Message]:
    return [Message(m["id"], m["role"], m["content"]) for m in conversation["messages"]]


_TYPES = {"user": "human", "assistant": "ai", "tool": "tool", "system": "system"}


def wire_messages(conversation: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation as an agent sends it: LangChain message dicts."""
    wire = []
    for message in conversation["messages"]:
        item: dict[str, Any] = {
            "id": message["id"],
            "type": _TYPES[message["role"]],
            "content": message["content"],
        }
        for extra in ("additional_kwargs", "tool_calls", "tool_call_id"):
            if extra in message:
                item[extra] = message[extra]
        wire.append(item)
    return wire


def run_conversation(conversation: dict[str, Any]) -> Call:
    """Feed one conversation through ingestion (flush: no debounce) and classify the outcome."""
    from facts import ingestion
    from facts.models import ExtractionRun, Turn

    name = conversation["name"]
    started = time.perf_counter()
    try:
        receipt = ingestion.record_turn(
            user_id=conversation["user_id"],
            agent_name=conversation["agent_name"],
            thread_id=conversation["thread_id"],
            project_id=conversation.get("project_id"),
            messages=wire_messages(conversation),
            flush=True,
        )
    except Exception as exc:  # the harness reports crashes instead of dying on the first one
        traceback.print_exc()
        return Call(name, "crash", time.perf_counter() - started, error=f"{type(exc).__name__}: {exc}")
    wall = time.perf_counter() - started

    turns = list(Turn.objects.filter(id__in=receipt.turn_ids))
    runs = list(ExtractionRun.objects.filter(turns__in=turns).distinct().order_by("id"))
    run_ids = tuple(run.id for run in runs)
    return classify(name, turns, runs, wall, run_ids)


def classify(name: str, turns: list[Any], runs: list[Any], wall: float, run_ids: tuple[int, ...]) -> Call:
    from facts.models import ExtractionRun, Turn

    if not runs:
        if turns and all(t.status == Turn.Status.SKIPPED for t in turns):
            return Call(name, "skipped", None, run_ids)
        failed = [t for t in turns if t.status == Turn.Status.FAILED]
        if failed:
            return Call(name, "error", wall, run_ids, error=failed[0].error)
        states = ", ".join(sorted({t.status for t in turns})) or "no turns"
        return Call(name, "none", wall, run_ids, error=f"no extraction run; turns {states}")
    seconds = sum((run.model_ms or 0.0) for run in runs) / 1000 or wall
    prompt = sum(run.prompt_tokens or 0 for run in runs) or None
    completion = sum(run.completion_tokens or 0 for run in runs) or None
    statuses = {run.status for run in runs}
    if ExtractionRun.Status.FAILED in statuses:
        error = next(run.error for run in runs if run.status == ExtractionRun.Status.FAILED)
        return Call(name, "error", seconds, run_ids, error, prompt, completion)
    if statuses == {ExtractionRun.Status.SKIPPED}:
        return Call(name, "skipped", None, run_ids)
    if statuses - {ExtractionRun.Status.SUCCEEDED, ExtractionRun.Status.SKIPPED}:
        return Call(name, "none", seconds, run_ids, f"run left {', '.join(sorted(statuses))}", prompt, completion)
    if any(run.raw_output is None for run in runs if run.status == ExtractionRun.Status.SUCCEEDED):
        return Call(name, "none", seconds, run_ids, "succeeded without the model's output", prompt, completion)
    return Call(name, "update", seconds, run_ids, "", prompt, completion)


def collect_candidates() -> list[CandidateRow]:
    from facts.models import Candidate

    rows = []
    for c in Candidate.objects.order_by("run_id", "position", "id"):
        label = c.key or c.section or ""
        rows.append(
            CandidateRow(
                id=c.id,
                run_id=c.run_id,
                kind=c.kind,
                label=label,
                content=c.content,
                verdict=c.verdict,
                reasons=tuple(c.reasons or ()),
                confidence=c.confidence,
                evidence_message_id=c.evidence_message_id,
                evidence_text=c.evidence_text,
                validation_error=c.validation_error,
            )
        )
    return rows


def collect_stored() -> list[StoredMemory]:
    """What extraction wrote, read from the files (the source of truth), not the mirror."""
    from facts.enums import PROFILE_SECTIONS, SourceKind
    from facts.store import get_store

    store = get_store()
    stored = []
    for card in (store.read_card_at(path) for path in store.card_files()):
        if card.source.kind != SourceKind.EXTRACTION:
            continue
        stored.append(
            StoredMemory(
                kind="card",
                id=card.id,
                content=card.content,
                thread_id=card.source.thread_id or "",
                message_id=card.source.message_id or "",
                evidence_text=card.source.evidence_text or "",
                confidence=card.confidence,
            )
        )
    for profile_file in store.profile_files():
        profile = store.read_profile_at(profile_file)
        for name in PROFILE_SECTIONS:
            section = profile.section(name)
            source = section.source
            if not section.summary or source is None or source.kind != SourceKind.EXTRACTION:
                continue
            stored.append(
                StoredMemory(
                    kind="section",
                    id=f"{profile.user_id}:{name}",
                    content=section.summary,
                    thread_id=source.thread_id or "",
                    message_id=source.message_id or "",
                    evidence_text=source.evidence_text or "",
                )
            )
    return stored


def queue_problems(candidates: list[CandidateRow], runs: list[int]) -> list[str]:
    """Runs and candidates must be visible to reviewers: in the DB rows the queue reads
    and, once the dashboard's review queue page exists, on that page."""
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import NoReverseMatch, reverse

    from facts.access import ensure_roles
    from facts.models import Candidate, ExtractionRun

    queued_runs = set(ExtractionRun.objects.values_list("id", flat=True))
    queued_candidates = set(Candidate.objects.filter(run_id__in=queued_runs).values_list("id", flat=True))
    page_text = None
    url = None
    for name in QUEUE_URL_NAMES:
        try:
            url = reverse(name)
        except NoReverseMatch:
            continue
        break
    if url is not None:
        from django.contrib.auth.models import Group

        ensure_roles()
        reviewer, _ = User.objects.get_or_create(username="e2e-reviewer")
        reviewer.groups.add(Group.objects.get(name="reviewer"))
        client = Client()
        client.force_login(reviewer)
        texts = []
        # All candidates, whatever their verdict or review state: ask for every filter
        # value the page offers, plus its default view.
        for query in QUEUE_QUERIES:
            response = client.get(url, query)
            if response.status_code != 200:
                return [f"review queue {url}?{query} answered {response.status_code}"]
            texts.append(response.content.decode())
        page_text = "\n".join(texts)
        print(f"e2e: review queue page {url} checked", file=sys.stderr)
    else:
        print("e2e: no review queue page yet; checked the DB rows it will read", file=sys.stderr)
    return check_queue(runs, [c.id for c in candidates], queued_runs, queued_candidates, page_text)


QUEUE_URL_NAMES = ("review_queue", "facts:review_queue", "review", "candidates", "candidate_list")
QUEUE_QUERIES: tuple[dict[str, str], ...] = (
    {},
    {"verdict": "rejected"},
    {"verdict": "accepted"},
    {"state": "all"},
    {"verdict": "", "state": ""},
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--conversations", type=Path, default=CONVERSATIONS)
    parser.add_argument("--only", action="append", default=[], help="run only the named conversation(s)")
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryadmin.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)

    conversations = load_conversations(args.conversations)
    if args.only:
        conversations = [c for c in conversations if c["name"] in args.only]
    print(
        f"e2e: {len(conversations)} conversations → {settings.MEMORY_LLM_MODEL} at {settings.MEMORY_LLM_BASE_URL} "
        f"({settings.MEMORY_LLM_METHOD}, max_tokens {settings.MEMORY_LLM_MAX_TOKENS}); VAR_DIR {settings.VAR_DIR}",
        file=sys.stderr,
    )
    calls = []
    for conversation in conversations:
        call = run_conversation(conversation)
        took = "" if call.seconds is None else f" {call.seconds:.1f} s"
        print(f"e2e: {call.conversation}: {call.outcome}{took}", file=sys.stderr)
        calls.append(call)

    candidates = collect_candidates()
    stored = collect_stored()
    threads = {c["thread_id"]: as_messages(c) for c in conversations}
    run_ids = sorted({rid for call in calls for rid in call.run_ids})
    problems = check_calls(calls) + check_evidence(stored, threads) + queue_problems(candidates, run_ids)
    summary = summarize(calls, candidates, stored)
    print(
        render(
            summary,
            calls,
            candidates,
            stored,
            problems,
            model=settings.MEMORY_LLM_MODEL,
            method=settings.MEMORY_LLM_METHOD,
        )
    )
    (args.run_dir / "report.json").write_text(
        json.dumps(
            {
                "calls": [call.__dict__ for call in calls],
                "candidates": [c.__dict__ for c in candidates],
                "stored": [s.__dict__ for s in stored],
                "problems": problems,
            },
            ensure_ascii=False,
            indent=2,
            default=list,
        ),
        encoding="utf-8",
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
