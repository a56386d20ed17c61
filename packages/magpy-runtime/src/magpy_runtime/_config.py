"""Runtime configuration, read once from the environment and patchable in tests.

This module is the one place MagPy reads its ``MAGPY_*`` environment variables (``VARIABLES``
lists them; docs/config.md documents each; ``tools/check_layering.py`` refuses a ``MAGPY_*``
name anywhere else in the sources). The packages below the runtime get their settings passed
down: ``verify`` reaches each capture's RefGraph through ``magpy_monitor``'s ``prepare`` and
``SegmentHost.verify_graphs``; ``cache_dir`` and ``snapcheck`` reach ``magpy_codegen`` as a
``NativeSettings`` (``configure_native``), pushed at import and whenever either field is set.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import attrs
import torch

from magpy_codegen import NativeSettings, configure_native

__all__ = ["VARIABLES", "Config", "background_compile", "config", "environ", "record_limit"]

# Every MAGPY_* environment variable MagPy reads -> the ``Config`` field it sets (or, in
# parentheses, who else uses it). docs/config.md has one row for each (a test checks it).
VARIABLES: dict[str, str] = {
    "MAGPY_MAX_RECORDS": "max_records",
    "MAGPY_VERIFY": "verify",
    "MAGPY_SPECULATE": "speculate",
    "MAGPY_LOGS": "logs",
    "MAGPY_BACKGROUND_COMPILE": "background_compile",
    "MAGPY_RECORDS_DIR": "records_dir",
    "MAGPY_RECORDS_NATIVE": "records_native",
    "MAGPY_CACHE_DIR": "cache_dir",
    "MAGPY_SNAPCHECK": "snapcheck",
    "MAGPY_MODELS_DIR": "(magpy demo / magpy bench: where the bundled models are)",
}


def environ(name: str, default: str = "") -> str:
    """The value of MagPy's environment variable ``name`` now (``default`` when unset); the
    only read of a ``MAGPY_*`` variable. A name missing from ``VARIABLES`` is a bug."""
    if name not in VARIABLES:
        raise KeyError(f"{name} is not one of MagPy's variables ({sorted(VARIABLES)})")
    return os.environ.get(name, default)


def _positive_int(variable: str, default: int) -> int:
    """The int >= 1 that environment variable ``variable`` holds, ``default`` when unset."""
    text = environ(variable).strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{variable} must be an int >= 1, got {text!r}")
    return value


def _native_changed(config: Config, field: attrs.Attribute[Any], value: Any) -> Any:
    """``on_setattr`` of the fields in ``NativeSettings``: pass the new settings down."""
    if field.name == "snapcheck" and value not in ("c", "python"):
        raise ValueError(f"snapcheck must be 'c' or 'python', got {value!r}")
    configure_native(attrs.evolve(config.native(), **{field.name: value}))
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
    sites).
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
    ``cache_dir``: where MagPy keeps what it builds for itself, the C snapshot check
    (``MAGPY_CACHE_DIR``; None: ``~/.cache/magpy``). ``snapcheck``: ``"c"`` builds and uses the
    guard memo's snapshot check in C (``magpy_codegen._cbuild``), ``"python"`` keeps the
    Python one (``MAGPY_SNAPCHECK=python``); read when the check is first needed.
    """

    max_records: int = 8
    verify: bool = False
    speculate: bool = True
    max_assumption_misses: int = 3
    logs: frozenset[str] = frozenset()
    background_compile: bool = False
    records_dir: str | None = None
    records_native: bool = True
    cache_dir: str | None = attrs.field(default=None, on_setattr=_native_changed)
    snapcheck: str = attrs.field(default="c", on_setattr=_native_changed)

    @classmethod
    def from_env(cls) -> Config:
        logs = frozenset(t.strip() for t in environ("MAGPY_LOGS").split(",") if t.strip())
        return cls(
            max_records=_positive_int("MAGPY_MAX_RECORDS", 8),
            verify=environ("MAGPY_VERIFY") not in ("", "0"),
            speculate=environ("MAGPY_SPECULATE", "1") not in ("", "0"),
            logs=logs,
            background_compile=environ("MAGPY_BACKGROUND_COMPILE").strip() not in ("", "0"),
            records_dir=environ("MAGPY_RECORDS_DIR").strip() or None,
            records_native=environ("MAGPY_RECORDS_NATIVE", "1").strip() not in ("", "0"),
            cache_dir=environ("MAGPY_CACHE_DIR") or None,
            snapcheck="python" if environ("MAGPY_SNAPCHECK").strip().lower() == "python" else "c",
        )

    def native(self) -> NativeSettings:
        """The settings ``magpy_codegen`` builds its native helpers with."""
        return NativeSettings(cache_dir=self.cache_dir, snapcheck=self.snapcheck)

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
configure_native(config.native())


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
        set_here = mine != DEFAULT_MAX_RECORDS or bool(environ("MAGPY_MAX_RECORDS"))
        return mine, "magpy.config.max_records" + ("" if set_here else " (default)")
    return theirs, "torch._dynamo.config.recompile_limit"
