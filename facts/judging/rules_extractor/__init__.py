"""The embedded extractor: explicit first-person statements found by rules, no model.

Used when no model server is configured (`facts.judging.extraction.active_extractor`). It reads
only the user's rows and proposes a `FactCandidate` for each explicit, first-person
statement it recognizes, in Chinese or English:

- preferences: "I prefer …", "please always …", "never …", "我喜欢/不喜欢 …", "以后请 …";
- identity and work: "my name is …", "I work as …", "I'm a … engineer", "我是 …",
  "我平时主要 …", "我在 … 工作";
- goals: "I'm learning …", "my goal is …", "我在学 …";
- corrections: "actually, …", "不对，…" in front of any of the above;
- project rules: "this repo uses …", "这个项目用 …" (scope project).

It labels what it finds the way the LLM is asked to (docs/design.md §5): a one-off request
("just for this answer", "这次先…") is `temporary` and thread-scoped, a grant to act
("you can push …", "你可以直接部署") is `transactional`, a hedge ("maybe", "可能")
lowers the confidence, and a statement it only half recognizes gets a low confidence,
so the gate rejects all of them into the review queue instead of memory. Questions,
hypotheticals, other people ("my colleague prefers …") and the assistant's words give
nothing. The evidence is always a verbatim slice of the user's message.

Keys are stable: a known attribute (`response_language`, `indentation`, `editor`, `name`,
`occupation` …) when the statement names one, else the statement's subject words
(`pref_dark_mode`, `pref_深色主题`), so saying the same thing twice is a duplicate and a
changed value of the same attribute replaces the old card.

The package, in the order a message goes through it:

- `text`: splitting a message into sentences and clauses, trimming a piece;
- `markers`: the words that label a statement (lead-ins, corrections, "this time",
  "always", hedges, hypotheticals, questions, requests);
- `keys`: the attributes and topics a statement may name, and the key it gets;
- `statement`: what one clause says (`Statement`), the confidence levels, and how its
  content is phrased about the user;
- `english`, `chinese`: the rules reading one clause of each language;
- `extractor`: driving it: project rules and bare requests, a sentence's clauses and
  their labels, and the entry points `extract_facts` and `run` (`NAME`).
"""
