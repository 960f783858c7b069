"""Curation: what a person does to memory, in the write side.

Every verb a curator (or an agent, through the API) applies to memory lives here and
nowhere else: it takes the actor and the request's data (never an HTTP request), writes
through `facts.storage.writer` and records its `AuditEvent` through `facts.audit`. Views and the
API call these functions and only translate their errors into pages and answers.

- `cards`: correct, expire, restore, review-by, revert and delete-for-good of one card,
  and resolving a conflict between cards.
- `profiles`: editing a profile's sections and reverting it to a past version.
- `review`: a reviewer's approve, correct-and-approve, dismiss and undo on candidates,
  and which candidates may be reviewed at all (checked here, at every door).
- `manual`: a fact a curator adds by hand.
"""
