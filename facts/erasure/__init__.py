"""Erasure: forget a user, or one agent, thread or project of theirs, down to the bytes.

docs/design.md §12 "Forgetting is a write". One service for every door (`manage.py erase`,
the person page, "Forget this conversation"):

1. a durable marker (`Erasure` row, status running) is committed first: from then on
   turns in its scope are refused (`ErasureInProgress`, the API answers 409), the worker
   claims nothing of it, and the write function refuses new cards and profile changes
   of the user;
2. the cards go through the same locks and the same write function as any other change
   (`writer.commit` with `Delete`s, `writer.delete_profile`), so mirror and index follow;
3. what the files do not hold goes: turns, runs (filtered messages, raw model output),
   candidates, extracted message ids, card and profile revisions, usage counters,
   golden queries naming the erased cards, queued worker tasks carrying the user's ids;
   audit events keep that something happened but lose their free text;
4. the bytes: every SQLite file under MEMORY_ROOT and the Django SQLite database get
   FTS5 segments merged ('optimize'), a VACUUM with secure_delete (free pages and the
   free space inside pages held deleted text) and a WAL checkpoint(TRUNCATE);
5. one audit event with ids and counts, never content; the marker becomes `done`.

Every step is idempotent and looks at the files and rows as they are, so an erasure
killed at any point is finished by running it again (`erase` resumes the running marker
of the same scope).

The package: `scope` (what to erase), `guard` (the marker's effect on every other
writer: `refuse_turn`, `refuse_cards`, `refuse_runs`, `refuse_profile`), `plan` (the dry
run: what an erasure of a scope removes), `run` (`erase`: steps 1–3 and 5) and `scrub`
(step 4, the bytes).
"""
