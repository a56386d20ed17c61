"""Where ``magpy demo`` and ``magpy bench`` find the bundled models and keep Inductor's cache.

The models live in ``integration/models`` (our own implementations with random weights), found
next to a source checkout, or wherever ``MAGPY_MODELS_DIR`` points (read by the runtime's
config, ``environ``, like every MagPy variable). Inductor's cache goes to
``<user cache>/magpy/inductor`` unless ``TORCHINDUCTOR_CACHE_DIR`` says otherwise. No torch
compiler here: ``magpy._cli`` uses this module before it imports Dynamo or Inductor.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from magpy_runtime._config import environ

__all__ = ["find_models_dir", "inductor_cache_dir", "load_models"]

_MODELS_PACKAGE = "_magpy_bench_models"
_MODELS_SUBDIR = Path("integration", "models")


def find_models_dir() -> Path | None:
    """``$MAGPY_MODELS_DIR``, else ``integration/models`` of the current directory or of the
    source checkout this file lives in; None when none exists."""
    env = environ("MAGPY_MODELS_DIR")
    candidates = [Path(env)] if env else []
    candidates += [
        Path.cwd() / _MODELS_SUBDIR,
        Path(__file__).resolve().parents[2] / _MODELS_SUBDIR,
    ]
    return next((p for p in candidates if (p / "__init__.py").is_file()), None)


def load_models(path: Path | None = None) -> Any:
    """Import the models package (``MODELS``: name -> ``build(size)``) from ``path``."""
    if _MODELS_PACKAGE in sys.modules:
        return sys.modules[_MODELS_PACKAGE]
    path = path or find_models_dir()
    if path is None:
        raise FileNotFoundError(
            f"the bundled models ({_MODELS_SUBDIR}) were not found; run from a "
            f"MagPy source checkout or set MAGPY_MODELS_DIR"
        )
    spec = importlib.util.spec_from_file_location(
        _MODELS_PACKAGE, path / "__init__.py", submodule_search_locations=[str(path)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODELS_PACKAGE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_MODELS_PACKAGE]
        raise
    return module


def inductor_cache_dir() -> Path:
    """Point Inductor's cache at ``<user cache>/magpy/inductor`` unless the user chose one.

    Call it before torch._dynamo or torch._inductor is imported: importing either sets
    ``TORCHINDUCTOR_CACHE_DIR`` to torch's default when it is unset."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(base / "magpy" / "inductor"))
    return Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
