"""The objects ``magpy.compile`` returns: ``CompiledFunction`` and ``CompiledModule``.

A call enters the record cache from C: the wrapper's ``__call__`` is a property (with a native
getter) whose value is the instance's ``functools.partial(run, state, original)``, so ``run``
is the only MagPy frame between the caller and the original on a hit or a native call (see
``_boundary_importlib_bootstrap`` and ``_depth``).

Copies. A copy never copies records: ``copy.deepcopy`` and ``pickle`` of a compiled module
give the same compilation (backend, ``fullgraph``, ``dynamic``, options) of a deep copy / the
unpickled copy of the original module, with an empty cache; ``copy.copy`` compiles the same
module again. Like every compilation of the same code and settings, the copy may adopt the
original's records where their guards pass for it (``_pool``).
A compiled function copies as a function does (``copy``/``deepcopy`` give it back) and pickles
by reference where its module holds it under its name; otherwise as "compile this function
again", the function pickled by reference (a local function fails as pickling it would).

A compiled module forwards the container protocols the wrapped module's class has (``len``,
``m[i]``, ``m[a:b]``, item assignment and deletion, ``iter``, ``in``, ``reversed``, ``bool``,
``+=``): a ``Sequential`` stays indexable and its items are the original submodules. The class
of such a wrapper is a subclass of ``CompiledModule`` that defines only those protocols, so
``isinstance(m, collections.abc.Iterable)`` answers as for the original.
"""

from __future__ import annotations

import functools
import inspect
import operator
import sys
from collections.abc import Callable
from typing import Any

import torch

from ._settings import Settings
from .cache._boundary_importlib_bootstrap import run
from .cache._cache import CacheState
from .cache._pool import join

__all__ = ["CompiledFunction", "CompiledModule", "rebuild", "wrap"]

# (the pickled form: the qualname, then the ``Settings`` fields as plain values)
Copied = tuple[str, Any, bool, "bool | None", "int | None"]


def _settings(state: CacheState) -> Copied:
    """What a copy is compiled with (never the records or counters)."""
    return (state.qualname, state.backend, state.fullgraph, state.dynamic, state.max_records)


def rebuild(model: Any, settings: Copied) -> Any:
    """``model`` compiled with ``settings``, with an empty cache (unpickling, copies)."""
    qualname, backend, fullgraph, dynamic, max_records = settings
    state = CacheState(qualname, Settings(backend, fullgraph, dynamic, max_records))
    join(state, model)
    return wrap(model, state)


def wrap(model: Any, state: CacheState) -> Any:
    """The compiled callable of ``model`` going through ``state``."""
    if isinstance(model, torch.nn.Module):
        return _module_class(type(model))(model, state)
    return CompiledFunction(model, state)


# the wrappers' ``__call__``: the instance's ``functools.partial(run, state, original)``, read
# by a property whose getter is native, so a call reaches ``run`` without a frame of the wrapper
_ENTER_FROM_C: Any = property(operator.attrgetter("_magpy_call"))


def _by_name(obj: Any) -> Any:
    """What ``obj``'s module holds under ``obj``'s qualified name (None if nothing)."""
    found: Any = sys.modules.get(getattr(obj, "__module__", None) or "")
    for part in str(getattr(obj, "__qualname__", "<locals>")).split("."):
        if found is None or part == "<locals>":
            return None
        found = getattr(found, part, None)
    return found


class CompiledFunction:
    """A function compiled by MagPy; calling it goes through its record cache."""

    def __init__(self, fn: Callable[..., Any], state: CacheState) -> None:
        self._magpy_original = fn
        self._magpy_state = state
        self._magpy_call = functools.partial(run, state, fn)
        functools.update_wrapper(self, fn)

    __call__ = _ENTER_FROM_C

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return functools.partial(self._magpy_call, obj)

    def __repr__(self) -> str:
        return f"<magpy compiled {self._magpy_state.qualname}>"

    def __copy__(self) -> CompiledFunction:
        return self  # as copy.copy of a function

    def __deepcopy__(self, memo: dict[int, Any]) -> CompiledFunction:
        return self  # as copy.deepcopy of a function

    def __reduce__(self) -> str | tuple[Any, ...]:
        if _by_name(self) is self:
            return str(self.__qualname__)  # by reference, like the function
        return (rebuild, (self._magpy_original, _settings(self._magpy_state)))


_WRAPPER_ATTRS = frozenset(
    {"_orig_mod", "_magpy_original", "_magpy_state", "_magpy_call", "training"}
)


class CompiledModule(torch.nn.Module):
    """An ``nn.Module`` whose calls go through MagPy; behaves as the wrapped module.

    Parameters, buffers, ``state_dict``, ``train``/``eval`` and attribute access reach the
    original module (``_orig_mod``), like ``torch.compile``'s ``OptimizedModule``.
    """

    def __init__(self, mod: torch.nn.Module, state: CacheState) -> None:
        super().__init__()
        self._orig_mod = mod
        object.__setattr__(self, "_magpy_original", mod)
        object.__setattr__(self, "_magpy_state", state)
        object.__setattr__(self, "_magpy_call", functools.partial(run, state, mod))
        object.__setattr__(self, "training", mod.training)

    __call__ = _ENTER_FROM_C
    __signature__ = inspect.Signature(  # what ``inspect.signature(compiled_module)`` says
        [
            inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
            inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
        ]
    )

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return run(self._magpy_state, self._orig_mod, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name in ("_orig_mod", "_magpy_original"):
            return super().__getattr__(name)
        return getattr(self._orig_mod, name)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self._orig_mod.state_dict(*args, **kwargs)

    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self._orig_mod.load_state_dict(*args, **kwargs)

    def train(self, mode: bool = True) -> CompiledModule:
        self._orig_mod.train(mode)
        object.__setattr__(self, "training", mode)  # mirror the flag, like OptimizedModule
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _WRAPPER_ATTRS or "_orig_mod" not in self.__dict__.get("_modules", {}):
            super().__setattr__(name, value)
        else:
            setattr(self._orig_mod, name, value)

    def __delattr__(self, name: str) -> None:
        if name in _WRAPPER_ATTRS or hasattr(type(self), name):
            super().__delattr__(name)
        else:
            delattr(self._orig_mod, name)

    def __dir__(self) -> list[str]:
        own = list(self._orig_mod.__dir__())
        return own + [a for a in super().__dir__() if a not in own]

    def __repr__(self) -> str:
        return f"MagPy({self._orig_mod!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (rebuild, (self._orig_mod, _settings(self._magpy_state)))


# ---------------------------------------------------------------------- container protocols
def _inplace(op: str) -> Callable[[CompiledModule, Any], Any]:
    def method(self: CompiledModule, other: Any) -> Any:
        out = getattr(self._orig_mod, op)(other)
        return self if out is self._orig_mod else out

    method.__name__ = op
    return method


def _forward(op: str) -> Callable[..., Any]:
    def method(self: CompiledModule, *args: Any) -> Any:
        return getattr(type(self._orig_mod), op)(self._orig_mod, *args)

    method.__name__ = op
    return method


_FORWARDED = (
    "__len__ __getitem__ __setitem__ __delitem__ __iter__ __contains__ __reversed__ __bool__ "
    "__add__ __radd__ __mul__ __rmul__"
).split()
_INPLACE = ("__iadd__", "__imul__")
_PROTOCOLS: dict[str, Callable[..., Any]] = {
    **{op: _forward(op) for op in _FORWARDED},
    **{op: _inplace(op) for op in _INPLACE},
}
_classes: dict[frozenset[str], type[CompiledModule]] = {}


def _module_class(cls: type) -> type[CompiledModule]:
    """``CompiledModule``, with the container protocols of ``cls`` forwarded."""
    names = frozenset(op for op in _PROTOCOLS if getattr(cls, op, None) is not None)
    if not names:
        return CompiledModule
    sub = _classes.get(names)
    if sub is None:
        body: dict[str, Any] = {op: _PROTOCOLS[op] for op in names}
        body["__module__"] = __name__
        body["__qualname__"] = CompiledModule.__qualname__
        sub = _classes[names] = type(CompiledModule.__name__, (CompiledModule,), body)
    return sub
