"""MagPy's runtime: record cache and the public API (``magpy.compile`` and friends)."""

# sympy, which torch's shape reasoning imports on a first compile, adds an entry to
# ``warnings.filters`` when imported: imported with MagPy, so that no compiled call changes the
# program's warning filters midway
import sympy  # type: ignore[import-untyped]  # noqa: F401

from ._api import (
    CacheStats,
    CompiledFunction,
    CompiledModule,
    ExplainOutput,
    annotate,
    compile,
    explain,
    reset,
    set_stance,
    stats,
    wait_compiles,
)
from ._config import config
from ._disable import disable
from ._errors import BundleError, FullGraphError, MagPyWarning, StanceError
from ._torch_compile import TorchCompileRedirect, use_for_torch_compile
from .cache._cache import BreakReason
from .store._bundle import BundleInfo, load_cache_artifacts, save_cache_artifacts

__version__ = "0.1.0"

__all__ = [
    "BreakReason",
    "BundleError",
    "BundleInfo",
    "CacheStats",
    "CompiledFunction",
    "CompiledModule",
    "ExplainOutput",
    "FullGraphError",
    "MagPyWarning",
    "StanceError",
    "TorchCompileRedirect",
    "annotate",
    "compile",
    "config",
    "disable",
    "explain",
    "load_cache_artifacts",
    "reset",
    "save_cache_artifacts",
    "set_stance",
    "stats",
    "use_for_torch_compile",
    "wait_compiles",
]
