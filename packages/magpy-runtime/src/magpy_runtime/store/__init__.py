"""The store of persistent records: records on disk and in loaded bundles.

The store (``_store``: serve, commit, attach), its files (``_entryfiles``), what an entry holds
(``_persist``), keys (``_keys``), records kept in memory for a bundle (``_kept``), native
libraries (``_libraries``) and bundles (``_bundle``, ``_bundled``). It imports only the
top-level shared modules (``_config``, ``_errors``, ``_logging``, ``_owner``, ``_settings``),
never ``cache``. The map: docs/runtime.md.
"""
