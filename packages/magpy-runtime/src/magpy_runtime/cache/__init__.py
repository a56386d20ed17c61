"""The record cache: a compiled callable's records and the path of a call through them.

The entry trampoline (``_boundary_importlib_bootstrap``), one callable's state (``_cache``), the
one hit loop (``_recordcache``), the record sources (``_sources``, ``_pool``), counters
(``_stats``), dynamic promotion (``_dynamic``), the compiler stance (``_stance``), the memo
(``_tree``), recursion headroom (``_depth``), lazy initialisation (``_ownstate``) and split mode
(``_sites``, ``_sitestate``, ``_codes``). It may import ``store`` and the top-level shared
modules; ``store`` never imports it. The map: docs/runtime.md.
"""
