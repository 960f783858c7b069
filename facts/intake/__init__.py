"""Intake: a turn on its way in, before anything is judged.

`turns` is the one validation every door calls (API, middleware, MCP, `ingest`);
`sanitize` what a stored turn may contain; `queue` records it (durable, debounced per
thread) and schedules the worker's task (`facts.tasks`); `claims` leases the claimed
turns; `filtering` decides which messages a model may see; `people` checks a person's
id as people type it.
"""
