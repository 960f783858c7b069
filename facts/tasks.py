"""Worker tasks (django-tasks; `manage.py db_worker` runs them from the database queue)."""

from __future__ import annotations

from typing import Any

from django_tasks import TaskContext, task


@task(takes_context=True)
def process_thread_task(context: TaskContext, user_id: str, agent_name: str, thread_id: str) -> dict[str, Any]:
    """Extract the pending turns of one (user, agent, thread) once its debounce window is over.

    Every turn enqueues one of these for the end of its own window, so when turns come in
    quick succession the earlier tasks find the window still open and the last one merges
    them all into one extraction. The turns are claimed with the job's id, so the sweep
    that takes over a dead worker's turns can also close that worker's job row, which
    django-tasks-db would otherwise show as RUNNING for good.
    """
    from .ingestion import process_thread

    claim = str(context.task_result.id).replace("-", "")
    outcome = process_thread(user_id, agent_name, thread_id, claim=claim)
    data: dict[str, Any] = {"status": outcome.status, "turn_ids": outcome.turn_ids}
    if outcome.result is not None:
        data["run_id"] = outcome.result.run_id
    if outcome.error:
        data["error"] = outcome.error
    return data
