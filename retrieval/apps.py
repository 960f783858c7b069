from django.apps import AppConfig


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = "Memory: read side"

    def ready(self) -> None:
        # The index follows every committed write (docs/design.md §3). Registered here so
        # the write side never imports the read side.
        from facts import mirror
        from facts.storage import hooks

        from . import follow, index, scancache, tokenize

        hooks.on_cards_changed(index.on_cards_changed)
        hooks.on_cards_writing(index.prepare)
        # Each machine's worker keeps its local index in step with the others' writes.
        hooks.on_worker_start(follow.start)
        # A worker's first write would otherwise wait for the tokenizers (and the model).
        hooks.on_worker_start(tokenize.warm)
        # A rebuild's tokenizing and index rows are made in the scanning processes, on every core.
        # At most jieba is loaded before the fork (`index.scan_prepare`): the embedding
        # model is not needed to scan (vectors are embedded afterwards, and only for
        # texts the cache lacks).
        mirror.add_scan_extra(index.SCAN_EXTRA, index.scan_row, prepare=index.scan_prepare)
        # And files it has seen before are not parsed again (their digest names them).
        mirror.set_scan_cache(scancache.lookup)
