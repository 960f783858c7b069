"""Storage: memory's files and the one write function.

Ids and the folders they become (`ids`), the card and profile file formats
(`cardfile`, `profilefile`), atomic fsynced writes and cross-process locks (`atomic`,
`locks`), where files live and reading them (`store`), and `writer.commit`, through
which every change to memory goes (lock → files → mirror rows → `hooks`). `bulk` is
the multi-row INSERT of the hot tables; `errors` the store's errors. The bottom layer
of `facts`: it imports only `facts.models`, `facts.enums` and the erasure marker
(`facts.erasure.guard`).
"""
