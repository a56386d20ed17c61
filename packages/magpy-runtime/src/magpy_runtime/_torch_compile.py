"""``magpy.use_for_torch_compile()``: ``torch.compile`` and ``nn.Module.compile`` served by MagPy.

Programs rarely call ``torch.compile`` themselves: Hugging Face's ``Trainer``
(``TrainingArguments(torch_compile=True)``), Accelerate, Lightning and training scripts call it
for them. While a :class:`TorchCompileRedirect` is installed, ``torch.compile(...)`` and
``module.compile(...)`` go to :func:`magpy.compile` with their parameters mapped
(:func:`magpy_options`; the table is in the README). A call MagPy cannot honour (a backend
name only TorchDynamo knows, a backend callable that does not take ``(gm, example_inputs)``,
``options`` MagPy does not know, ``shapes_spec``) warns once per reason with a
``MagPyWarning`` and is compiled by the real ``torch.compile``: never silently. A
``torch._dynamo.config`` setting that MagPy does not read (``DYNAMO_CONFIG_NOT_READ``), set to
another value than torch's default, is warned once, with the reason, when MagPy compiles.

Installing replaces two attributes, ``torch.compile`` and ``torch.nn.Module.compile``; undoing
puts back exactly the objects found there (``torch.compiler.compile`` calls ``torch.compile`` by
name, so it follows). Nothing private of torch is touched.
"""

from __future__ import annotations

import inspect
import sys
import threading
import warnings
from collections.abc import Callable
from types import TracebackType
from typing import Any

import torch

from magpy_codegen import BACKENDS
from magpy_refgraph import UnknownOptionError

from ._api import check_compile_args, compile
from ._errors import MagPyWarning

__all__ = [
    "DYNAMO_CONFIG_NOT_READ",
    "Fallback",
    "TorchCompileRedirect",
    "dynamo_config_not_read",
    "magpy_options",
    "model_problem",
    "use_for_torch_compile",
]

# options torch.compile takes out of ``options`` for TorchDynamo itself
_DYNAMO_OPTIONS = ("guard_filter_fn", "use_aoti")


# TorchDynamo settings (``torch._dynamo.config``) that change what ``torch.compile`` does and
# that MagPy does not read: (name, torch's default, why). One set to another value is warned
# once when MagPy serves a ``torch.compile`` (``recompile_limit`` is honoured: ``_config``).
_SHAPES = (
    "MagPy decides which sizes are symbolic itself (dynamic=, and torch._dynamo.mark_dynamic, "
    "maybe_mark_dynamic, mark_static and mark_unbacked, which it honours)"
)
_CAPTURE = (
    "TorchDynamo's capture switch: MagPy captures .item() and data-dependent sizes by its own "
    "rules (a value it cannot follow is a graph break)"
)
DYNAMO_CONFIG_NOT_READ: tuple[tuple[str, Any, str], ...] = (
    ("automatic_dynamic_shapes", True, _SHAPES),
    ("assume_static_by_default", True, _SHAPES),
    ("specialize_int", False, _SHAPES),
    ("specialize_float", False, _SHAPES),
    ("capture_scalar_outputs", False, _CAPTURE),
    ("capture_dynamic_output_shape_ops", False, _CAPTURE),
    (
        "error_on_recompile",
        False,
        "use torch.compiler.set_stance('fail_on_recompile'), which MagPy honours",
    ),
    (
        "fail_on_recompile_limit_hit",
        False,
        "a callable that reaches its record limit runs eagerly, with a warning",
    ),
    (
        "accumulated_recompile_limit",
        256,
        "MagPy's limit is per compiled callable (recompile_limit, magpy.config.max_records)",
    ),
    (
        "suppress_errors",
        False,
        "a failure of MagPy's never reaches the program (the call runs eagerly, warned); "
        "the program's own errors are raised, as in eager",
    ),
)


def dynamo_config_not_read() -> list[str]:
    """The settings of ``DYNAMO_CONFIG_NOT_READ`` the program changed, each with its reason
    (none when TorchDynamo is not imported: nothing can have been set)."""
    module = sys.modules.get("torch._dynamo.config")
    if module is None:
        return []
    found = []
    for name, default, why in DYNAMO_CONFIG_NOT_READ:
        value = getattr(module, name, default)
        if value != default:
            found.append(f"torch._dynamo.config.{name} = {value!r} is not read by MagPy: {why}")
    return found


# Classes whose compiled form a library accepts only as TorchDynamo's ``OptimizedModule``
# (Lightning's ``Trainer.fit`` reads its ``dynamo_ctx``): (module, class name) -> what to do.
_WANT_OPTIMIZED_MODULE = {
    ("lightning.pytorch.core.module", "LightningModule"): "call model.compile() (in place)",
    ("pytorch_lightning.core.module", "LightningModule"): "call model.compile() (in place)",
}


class Fallback(str):
    """Why a ``torch.compile`` call goes to TorchDynamo (returned by :func:`magpy_options`)."""


def _default_backend() -> Any:
    """``torch.compile``'s backend when none is given: ``torch.compiler.get_default_backend()``
    once TorchDynamo is imported (only it can have changed the default), else "inductor"
    (asking imports TorchDynamo: seconds a program compiled with eager never spends)."""
    if "torch._dynamo" not in sys.modules:
        return "inductor"
    return torch.compiler.get_default_backend()


def _backend_problem(backend: Any) -> Fallback | None:
    if isinstance(backend, str):
        if backend in BACKENDS:
            return None
        return Fallback(
            f"backend {backend!r} (MagPy's backends: {sorted(BACKENDS)}, or a callable "
            "(gm, example_inputs) -> callable)"
        )
    if not callable(backend):
        return None  # (torch.compile's own error is the one to show: falls through)
    try:
        inspect.signature(backend).bind(None, [])
    except TypeError:
        return Fallback(f"backend {backend!r}: it does not take (gm, example_inputs)")
    except ValueError:  # (no signature to read: taken at its word)
        return None
    return None


def magpy_options(
    *,
    fullgraph: Any = False,
    dynamic: Any = None,
    backend: Any = None,
    mode: Any = None,
    options: Any = None,
    name: Any = None,
    disable: Any = False,
    recompile_limit: Any = None,
    isolate_recompiles: Any = False,
    shapes_spec: Any = None,
) -> dict[str, Any] | Fallback:
    """``torch.compile``'s keyword arguments as ``magpy.compile``'s, or why they cannot be.

    ``name`` only labels the compiled region for TorchDynamo's tools (MagPy has no use for it);
    ``recompile_limit`` is ``options["magpy.max_records"]`` (records kept before the callable
    runs eagerly); ``isolate_recompiles`` is what MagPy always does (each compiled callable
    counts its own records)."""
    del name, isolate_recompiles
    if shapes_spec is not None:
        return Fallback("shapes_spec (TorchDynamo's own)")
    if backend is None:
        backend = _default_backend()
    problem = _backend_problem(backend)
    if problem is not None:
        return problem
    if isinstance(options, dict):
        dynamo_only = [k for k in _DYNAMO_OPTIONS if k in options]
        if dynamo_only:
            return Fallback(f"options {dynamo_only} (TorchDynamo's own)")
        options = dict(options)
    if recompile_limit is not None:
        options = dict(options or {})
        options.setdefault("magpy.max_records", recompile_limit)
    kwargs = {
        "fullgraph": fullgraph,
        "dynamic": dynamic,
        "backend": backend,
        "mode": mode,
        "options": options,
        "disable": disable,
    }
    try:
        check_compile_args(**kwargs)
    except (UnknownOptionError, TypeError, ValueError) as exc:
        return Fallback(str(exc))
    return kwargs


def model_problem(model: Any) -> Fallback | None:
    """Why ``torch.compile(model)`` must return TorchDynamo's wrapper, if it must."""
    for cls in type(model).__mro__:
        remedy = _WANT_OPTIMIZED_MODULE.get((cls.__module__, cls.__qualname__))
        if remedy is not None:
            return Fallback(
                f"torch.compile of a {cls.__qualname__} ({cls.__module__} accepts only "
                f"TorchDynamo's OptimizedModule; to have MagPy compile it, {remedy})"
            )
    return None


class TorchCompileRedirect:
    """``torch.compile`` and ``nn.Module.compile`` served by MagPy until :meth:`undo`.

    A context manager too (``__exit__`` undoes). ``compiled`` holds what MagPy compiled for the
    program, in order; ``fallbacks`` the reasons calls went to TorchDynamo, one entry per call.
    """

    def __init__(self) -> None:
        self.compiled: list[Any] = []
        self.fallbacks: list[str] = []
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        self._saved: tuple[Any, Any] | None = None
        self._real_compile: Callable[..., Any] = torch.compile

    # ------------------------------------------------------------------ installing
    def install(self) -> TorchCompileRedirect:
        if self._saved is not None:
            raise RuntimeError("this redirect is installed already")
        module_compile = torch.nn.Module.__dict__["compile"]
        self._saved = (torch.compile, module_compile)
        self._real_compile = torch.compile
        torch.compile = self._torch_compile_entry()
        torch.nn.Module.compile = self._module_compile_entry()  # type: ignore[method-assign]
        return self

    def undo(self) -> None:
        """Put back the ``torch.compile`` and ``nn.Module.compile`` found at install (a second
        call does nothing)."""
        if self._saved is None:
            return
        torch.compile, torch.nn.Module.compile = self._saved  # type: ignore[method-assign]
        self._saved = None

    @property
    def installed(self) -> bool:
        return self._saved is not None

    def __enter__(self) -> TorchCompileRedirect:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.undo()

    # ------------------------------------------------------------------ serving calls
    def serve(self, model: Any, kwargs: dict[str, Any], *, stacklevel: int) -> Any:
        """One ``torch.compile(model, **kwargs)``: MagPy's where it can honour ``kwargs``,
        else TorchDynamo's (warned once per reason)."""
        mapped = magpy_options(**kwargs)
        if not isinstance(mapped, Fallback) and model is not None:
            mapped = model_problem(model) or mapped
        if isinstance(mapped, Fallback):
            self._fall_back(mapped, stacklevel + 1)
            return self._real_compile(model, **kwargs)
        if model is None:  # (@torch.compile(...) as a decorator)
            return lambda m: self.serve(m, kwargs, stacklevel=stacklevel)
        for note in dynamo_config_not_read():
            self._warn_once(note, f"torch.compile: {note}", stacklevel + 1)
        compiled = compile(model, **mapped)
        if compiled is not model:
            with self._lock:
                if not any(c is compiled for c in self.compiled):
                    self.compiled.append(compiled)
        return compiled

    def _fall_back(self, reason: str, stacklevel: int) -> None:
        with self._lock:
            self.fallbacks.append(reason)
        self._warn_once(
            reason,
            f"torch.compile: MagPy cannot honour {reason}; this call, and any other with "
            "the same reason, is compiled by TorchDynamo (the real torch.compile)",
            stacklevel + 1,
        )

    def _warn_once(self, reason: str, message: str, stacklevel: int) -> None:
        with self._lock:
            first = reason not in self._warned
            self._warned.add(reason)
        if first:
            warnings.warn(message, MagPyWarning, stacklevel=stacklevel + 1)

    def _torch_compile_entry(self) -> Callable[..., Any]:
        real = self._real_compile

        def torch_compile(model: Any = None, **kwargs: Any) -> Any:
            return self.serve(model, kwargs, stacklevel=2)

        torch_compile.__doc__ = real.__doc__
        torch_compile.__name__ = real.__name__
        torch_compile.__qualname__ = real.__qualname__
        torch_compile.__module__ = real.__module__
        torch_compile.__wrapped__ = real  # type: ignore[attr-defined]
        torch_compile.__magpy_redirect__ = self  # type: ignore[attr-defined]
        return torch_compile

    def _module_compile_entry(self) -> Callable[..., None]:
        redirect = self

        def module_compile(self: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
            """Compile this Module's ``__call__`` in place (``nn.Module.compile``), with MagPy
            where it can honour the arguments; ``magpy.stats(module)`` then reports it."""
            if args:
                raise TypeError(
                    f"compile() takes keyword arguments only (torch.compile's), got {args!r}"
                )
            compiled = redirect.serve(self._call_impl, kwargs, stacklevel=2)
            self._compiled_call_impl = compiled
            state = getattr(compiled, "_magpy_state", None)
            if state is not None:
                self.__dict__["_magpy_state"] = state
            else:
                self.__dict__.pop("_magpy_state", None)

        module_compile.__name__ = "compile"
        module_compile.__qualname__ = "Module.compile"
        module_compile.__magpy_redirect__ = redirect  # type: ignore[attr-defined]
        return module_compile


def use_for_torch_compile() -> TorchCompileRedirect:
    """From now on ``torch.compile`` and ``nn.Module.compile`` are MagPy's (``magpy.compile``).

    Returns the installed :class:`TorchCompileRedirect`; ``.undo()`` it, or use the call as a
    context manager (``with magpy.use_for_torch_compile(): ...``), to put back the originals.
    A call MagPy cannot honour warns once (``MagPyWarning``) and goes to the real
    ``torch.compile``."""
    return TorchCompileRedirect().install()
