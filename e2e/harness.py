"""`make e2e-llm`: run the real write path against a real model and check what it stored.

Started by `e2e/run.sh` once the model server is up, with the product's own settings in
the environment (``MEMORY_LLM_BASE_URL``, ``MEMORY_LLM_MODEL``, ``MEMORY_LLM_METHOD``,
a throwaway ``VAR_DIR``). It feeds each scripted conversation through ingestion's
synchronous path (`run_turns_now`: the worker's validation, filter, extraction, gate and
writer without the debounce), then reads back the DB rows the review
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


class Seam:
    """Watches `extract` where ingestion calls it: what each model call returned or raised.

    Observation only — the call and its result pass through unchanged.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[float, Any]] = []

    def __enter__(self) -> Seam:
        from facts.judging import pipeline

        self._module = pipeline
        self._real = pipeline.extract

        def watched(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                result = self._real(*args, **kwargs)
            except BaseException as exc:
                self.calls.append((time.perf_counter() - started, exc))
                raise
            self.calls.append((time.perf_counter() - started, result))
            return result

        pipeline.extract = watched
        return self

    def __exit__(self, *exc: object) -> None:
        self._module.extract = self._real


def run_conversation(conversation: dict[str, Any]) -> Call:
    """Feed one conversation through synchronous ingestion and classify the outcome."""
    from facts.judging import pipeline
    from facts.judging.extraction import ExtractionError

    name = conversation["name"]
    started = time.perf_counter()
    with Seam() as seam:
        try:
            result = pipeline.run_turns_now(
                user_id=conversation["user_id"],
                agent_name=conversation["agent_name"],
                thread_id=conversation["thread_id"],
                project_id=conversation.get("project_id"),
                messages=wire_messages(conversation),
            )
        except ExtractionError:
            result = None
        except Exception as exc:  # reported as a crash instead of ending the run at the first one
            traceback.print_exc()
            return Call(name, "crash", time.perf_counter() - started, error=f"{type(exc).__name__}: {exc}")
    return classify(name, seam.calls, _run_of(conversation, result))


def _run_of(conversation: dict[str, Any], result: Any) -> Any:
    from facts.models import ExtractionRun

    if result is not None and result.run_id is not None:
        return ExtractionRun.objects.get(pk=result.run_id)
    # An ExtractionError: the pipeline recorded the run as failed before raising.
    return (
        ExtractionRun.objects.filter(thread_id=conversation["thread_id"], user_id=conversation["user_id"])
        .order_by("-id")
        .first()
    )


def classify(name: str, seam_calls: list[tuple[float, Any]], run: Any) -> Call:
    """What one conversation's model call came to, checked at the seam and in the DB."""
    from facts.judging.extraction import Extraction, ExtractionError
    from facts.models import ExtractionRun

    run_ids = (run.id,) if run is not None else ()
    if run is None:
        return Call(name, "none", None, run_ids, "no extraction run was recorded")
    if run.status == ExtractionRun.Status.SKIPPED:
        if seam_calls:
            return Call(name, "none", None, run_ids, "the model was called for a skipped run")
        return Call(name, "skipped", None, run_ids)
    if len(seam_calls) != 1:
        return Call(name, "none", None, run_ids, f"{len(seam_calls)} model calls for one run")
    seconds, outcome = seam_calls[0]
    tokens = (run.prompt_tokens, run.completion_tokens)
    if isinstance(outcome, ExtractionError):
        if run.status != ExtractionRun.Status.FAILED or not run.error:
            return Call(name, "none", seconds, run_ids, f"ExtractionError not recorded on the run: {outcome}")
        return Call(name, "error", seconds, run_ids, run.error, *tokens)
    if isinstance(outcome, BaseException):
        return Call(name, "crash", seconds, run_ids, f"{type(outcome).__name__}: {outcome}", *tokens)
    if not isinstance(outcome, Extraction) or not isinstance(outcome.arguments, dict):
        return Call(name, "none", seconds, run_ids, f"extract returned {type(outcome).__name__}", *tokens)
    if run.status != ExtractionRun.Status.SUCCEEDED or run.raw_output is None:
        return Call(name, "none", seconds, run_ids, f"run {run.status} without the model's output", *tokens)
    return Call(name, "update", seconds, run_ids, "", *tokens)


def collect_candidates() -> list[CandidateRow]:
    from facts.models import Candidate

    rows = []
    for c in Candidate.objects.order_by("id"):
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
    from facts.storage.store import get_store

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
    """Runs and candidates must be visible to reviewers: in the DB rows the queue reads,
    and every candidate on the review queue page (all states, every page) and on its own
    detail page, as a logged-in reviewer sees them."""
    from django.contrib.auth.models import Group, User
    from django.test import Client
    from django.urls import NoReverseMatch, reverse

    from facts.access import ensure_roles
    from facts.models import Candidate, ExtractionRun

    queued_runs = set(ExtractionRun.objects.values_list("id", flat=True))
    queued_candidates = set(Candidate.objects.filter(run_id__in=queued_runs).values_list("id", flat=True))
    try:
        url = reverse("review_queue")
    except NoReverseMatch:
        print("e2e: no review queue page yet; checked the DB rows it will read", file=sys.stderr)
        return check_queue(runs, [c.id for c in candidates], queued_runs, queued_candidates)

    ensure_roles()
    reviewer, _ = User.objects.get_or_create(username="e2e-reviewer")
    reviewer.groups.add(Group.objects.get(name="reviewer"))
    client = Client()
    client.force_login(reviewer)
    problems: list[str] = []
    texts = []
    pages = max(1, -(-len(candidates) // PAGE_SIZE))
    for number in range(1, pages + 1):
        response = client.get(url, {"state": "all", "page": str(number)})
        if response.status_code != 200:
            problems.append(f"review queue {url} page {number} answered {response.status_code}")
        texts.append(response.content.decode())
    for candidate in candidates:
        detail = reverse("candidate_detail", args=[candidate.id])
        response = client.get(detail)
        if response.status_code != 200:
            problems.append(f"candidate {candidate.id}: {detail} answered {response.status_code}")
    print(f"e2e: review queue {url} ({pages} page(s)) and {len(candidates)} candidate pages checked", file=sys.stderr)
    return problems + check_queue(runs, [c.id for c in candidates], queued_runs, queued_candidates, "\n".join(texts))


# The review queue's page size is at least this; asking for more pages is harmless.
PAGE_SIZE = 25


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
