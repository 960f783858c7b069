"""Judging: from a turn's messages to verdicts and planned card writes.

`pipeline` runs one thread's turns: filtering → `extraction` (the model seam: an LLM,
or `rules_extractor` when none is configured) → `schemas` (what a model may propose,
item by item) → `gate` (the deterministic rules and their reason codes, the wording
rules in `wording`) → `runs` (recording the run and applying what passed) → `plan`
(the batch of card writes, committed through `facts.storage.writer`). `backtest`
replays recorded runs through the live gate with other settings, writing nothing.
"""
