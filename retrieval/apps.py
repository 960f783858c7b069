from django.apps import AppConfig


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = "Memory: read side"

    def ready(self) -> None:
        # The index follows every committed write (docs/design.md §3). Registered here so
        # the write side never imports the read side.
        from facts.erasure import extra
        from facts.storage import hooks, scan

        from . import follow, golden, index, indexrows, scancache, warmup

        hooks.on_cards_changed(index.on_cards_changed)
        hooks.on_cards_writing(index.prepare)
        # Each machine's worker keeps its local index in step with the others' writes.
        hooks.on_worker_start(follow.start)
        # A worker's first write would otherwise wait for the tokenizers (and the model).
        hooks.on_worker_start(warmup.warm)
        # A rebuild's tokenizing and index rows are made in the scanning processes, on every core.
        # At most jieba is loaded before the fork (`indexrows.scan_prepare`): the embedding
        # model is not needed to scan (vectors are embedded afterwards, and only for
        # texts the cache lacks).
        scan.add_scan_extra(indexrows.SCAN_EXTRA, indexrows.scan_row, prepare=indexrows.scan_prepare)
        # And files it has seen before are not parsed again (their digest names them).
        scan.set_scan_cache(scancache.lookup)
        # Saved search checks name cards and users: an erasure finds and deletes them too.
        extra.register("golden_queries", find=golden.erased_by, delete=golden.delete_erased)
