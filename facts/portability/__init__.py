"""Export and import of everything held about one user (issue 15, point 2).

`export_user` writes one zip archive that can be read without this software: the
user's card files and ``memory.json`` at the same relative paths as under
``MEMORY_ROOT`` (byte for byte), the project cards whose evidence came from the
user's conversations, the history rows as JSON Lines under ``history/``, a
``README.txt`` that explains it all, ``SHA256SUMS`` (for ``sha256sum -c``) and a
``manifest.json`` (format version, counts, creation time, SHA-256 of every file).

`import_archive` restores such an archive into a store where the user has no memory:
the whole archive is read and checked first (manifest, hashes, paths, sizes, every
card, the profile and every row), and only then is anything written — cards through
`facts.storage.writer.commit` and the profile through `facts.storage.writer.commit_profile`, so mirror,
history and index follow as for any other write. A refused archive changes nothing.

`archive` holds what both directions share (the format's names, the history kinds),
`export` writes an archive, `unpack` reads and checks one, `importer` restores it.
"""
