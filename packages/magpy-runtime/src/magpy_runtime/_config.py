"""Runtime configuration, read once from the environment and patchable in tests."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import attrs
import torch

__all__ = ["Config", "background_compile", "config", "record_limit"]


def _positive_int(variable: str, default: int) -> int:
    """The int >= 1 that environment variable ``variable`` holds, ``default`` when unset."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{variable} must be an int >= 1, got {text!r}")
    return value


@attrs.define
class Config:
    """Flags of the runtime.

    ``max_records``: records kept per compiled callable before it runs eagerly (env
    ``MAGPY_MAX_RECORDS``). ``verify``: check RefGraph invariants after every capture
    (``MAGPY_VERIFY=1``). ``speculate``: a tensor's value read into Python (``if t.any():``,
    ``t.item()``) is assumed to stay what the recording run saw and checked after each graph
    run, instead of being a graph break (``MAGPY_SPECULATE=0`` turns it off).
    ``max_assumption_misses``: calls a compiled callable (or one site) may miss every record
    because a tensor value its graphs read into Python differed from the value a record
    assumed, before such reads become graph breaks there. ``logs``: topics printed by the
    ``magpy`` logger (``MAGPY_LOGS``, comma separated: guards, mocks, graphs, breaks, records,
    sites). ``guard_tree_after``: hits after which a record's checks run as a C++ guard tree
    (``magpy_codegen._cguard``; building the first one imports TorchDynamo's guard module);
    None keeps every guard in Python, the default: measured, the tree is not yet faster than
    the Python guard (``MAGPY_GUARD_TREE=N`` turns it on after N hits).
    ``background_compile``: a new record whose backend compiles (not ``"eager"``) first runs
    its fx graph as is (eager speed, eager results) while the backend compiles it on MagPy's
    worker thread, then switches to the compiled graph (``MAGPY_BACKGROUND_COMPILE=1``; per
    callable: ``options={"magpy.background_compile": True}``). Off by default: which calls
    ran the graph as is then depends on how long the compile took, and the compiled graph's
    results may differ from eager's in the last bits (Inductor fuses and reorders
    reductions), so a run would no longer repeat itself exactly; and a compile competes with
    the program for the GIL and the cores. Graphs with symbolic sizes and training steps
    always compile while the call records (``magpy_codegen._background.compiles_later``).
    ``records_dir``: a directory where whole-call records are stored and served from after a
    restart (``MAGPY_RECORDS_DIR``; see ``_store`` and docs/persistent.md). None, the default:
    loading generated code from a directory is a decision to trust it, made explicitly.
    ``records_native``: a stored Inductor record's graph is also compiled ahead of time into a
    library (AOTInductor, on MagPy's worker thread, after the entry is written) that a new
    process loads without importing Inductor (``MAGPY_RECORDS_NATIVE=0`` turns it off).
    """

    max_records: int = 8
    verify: bool = False
    speculate: bool = True
    max_assumption_misses: int = 3
    logs: frozenset[str] = frozenset()
    guard_tree_after: int | None = None
    background_compile: bool = False
    records_dir: str | None = None
    records_native: bool = True

    @classmethod
    def from_env(cls) -> Config:
        logs = frozenset(
            t.strip() for t in os.environ.get("MAGPY_LOGS", "").split(",") if t.strip()
        )
        return cls(
            max_records=_positive_int("MAGPY_MAX_RECORDS", 8),
            verify=os.environ.get("MAGPY_VERIFY", "") not in ("", "0"),
            speculate=os.environ.get("MAGPY_SPECULATE", "1") not in ("", "0"),
            logs=logs,
            guard_tree_after=(
                None
                if os.environ.get("MAGPY_GUARD_TREE", "0").strip() in ("", "0")
                else _positive_int("MAGPY_GUARD_TREE", 1)
            ),
            background_compile=os.environ.get("MAGPY_BACKGROUND_COMPILE", "").strip()
            not in ("", "0"),
            records_dir=os.environ.get("MAGPY_RECORDS_DIR", "").strip() or None,
            records_native=os.environ.get("MAGPY_RECORDS_NATIVE", "1").strip() not in ("", "0"),
        )

    @contextlib.contextmanager
    def patch(self, **changes: Any) -> Iterator[Config]:
        """Temporarily change fields (tests)."""
        old = {k: getattr(self, k) for k in changes}
        for k, v in changes.items():
            setattr(self, k, v)
        try:
            yield self
        finally:
            for k, v in old.items():
                setattr(self, k, v)


def background_compile(own: bool | None) -> bool:
    """Whether a callable whose own option is ``own`` (None: not given) compiles in the
    background."""
    return config.background_compile if own is None else own


def graph_backend(backend: Any, capture: Any) -> Any:
    """The backend a record's graph is compiled with: ``backend``, but the plain graph
    (``"eager"``) where the program runs under a torch function mode or on a tensor subclass
    with ``__torch_function__``: a compiled kernel would bypass the hook, which in eager sees
    (and may change) every operation."""
    if capture.hooked or torch._C._len_torch_function_stack():
        return "eager"
    return backend


config = Config.from_env()


# ---------------------------------------------------------------------- the record limit
DEFAULT_MAX_RECORDS = 8  # Config.max_records's default, and torch's recompile_limit's
_TORCH_CONFIG = "torch._dynamo.config"  # (not imported by MagPy: set only if the program did)


def record_limit() -> tuple[int, str]:
    """The records a compiled callable without an ``options["magpy.max_records"]`` of its own
    keeps, and the setting that says so.

    ``magpy.config.max_records`` (``MAGPY_MAX_RECORDS``) and torch's
    ``torch._dynamo.config.recompile_limit`` name the same limit, and both default to 8. One
    set to another value counts (the value, not whether it was assigned: torch's
    ``config.patch`` leaves its default behind as if assigned); both: the smaller; neither:
    8."""
    mine = config.max_records
    theirs: int | None = None
    module = sys.modules.get(_TORCH_CONFIG)
    if module is not None and module.recompile_limit != DEFAULT_MAX_RECORDS:
        theirs = int(module.recompile_limit)
    if theirs is None or (mine != DEFAULT_MAX_RECORDS and mine <= theirs):
        set_here = mine != DEFAULT_MAX_RECORDS or "MAGPY_MAX_RECORDS" in os.environ
        return mine, "magpy.config.max_records" + ("" if set_here else " (default)")
    return theirs, "torch._dynamo.config.recompile_limit"
