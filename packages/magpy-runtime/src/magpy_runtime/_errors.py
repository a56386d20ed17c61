"""What the runtime raises and warns: ``FullGraphError``, ``StanceError``, ``BundleError`` and
``MagPyWarning``."""

from __future__ import annotations

from magpy_refgraph import Unsupported

__all__ = ["BundleError", "FullGraphError", "MagPyWarning", "StanceError"]


class FullGraphError(Unsupported, RuntimeError):
    """``fullgraph=True`` and the program could not be captured as one graph."""


class MagPyWarning(RuntimeWarning):
    """MagPy ran something eagerly instead of compiled (results are unaffected)."""


class StanceError(RuntimeError):
    """A compiled call under a compiler stance (``torch.compiler.set_stance``) that forbids
    it: ``"fail_on_recompile"`` and a call that would be recorded, or a stance MagPy refuses
    (``skip_guard_eval_unsafe=True``, an unknown name)."""


class BundleError(ValueError):
    """``magpy.load_cache_artifacts`` refused a bundle before using anything in it: not a
    bundle, a format this MagPy does not read, damaged, or not signed with the key given."""
