"""Whose Python a frame runs: the program's own, or a library's.

Some calls are modelled as a whole and run natively: a module class built inside ``forward``
(``nn.ReLU()``), a dataclass the mock builds again, an exception class. Python that such a call
runs is taken to be what the model says (deterministic in the guarded arguments, without
effects) only where it is a library's: torch's and the standard library's, or an installed
package's (``site-packages``: a ``ModelOutput.__post_init__`` of ``transformers``). The
program's own Python (a class it defines: its ``__init__``, ``__post_init__``, ``__new__``, a
metaclass's ``__call__``) is never assumed so: a modelled call that would run it natively is a
graph break (``program_frames``), unless its model follows that code like any call.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
import types
from collections.abc import Callable, Iterable
from typing import Any

from .valuetypes import FROZEN_MODULE_ROOTS

__all__ = ["program_frames", "program_function", "runs_program_code"]


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("purelib", "platlib", "stdlib", "platstdlib") if k in paths}
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs)


_LIBRARY_DIRS = _library_dirs()
# (MagPy's own code runs inside a construction only as a finalizer or a weakref callback)
_MAGPY = frozenset(("magpy", "magpy_refgraph", "magpy_monitor", "magpy_codegen", "magpy_runtime"))
_LIBRARY_ROOTS = FROZEN_MODULE_ROOTS | frozenset(sys.stdlib_module_names) | _MAGPY


def runs_program_code(frame: types.FrameType) -> bool:
    """Whether ``frame`` runs the program's own Python, not a library's."""
    return _program_code(frame.f_globals, frame.f_code)


def program_function(fn: Any) -> bool:
    """Whether ``fn`` (a ``staticmethod`` unwrapped) is a Python function of the program's."""
    fn = getattr(fn, "__func__", fn) if isinstance(fn, staticmethod | classmethod) else fn
    return isinstance(fn, types.FunctionType) and _program_code(fn.__globals__, fn.__code__)


def _program_code(globals_: dict[str, Any], code: types.CodeType) -> bool:
    """Code made by ``exec`` (a dataclass's generated ``__init__``) belongs to the module whose
    globals it runs in."""
    name = globals_.get("__name__")
    if not isinstance(name, str):
        return True
    if _namedtuple_new(globals_, name, code):
        return False
    if name.split(".")[0] in _LIBRARY_ROOTS:
        return False
    module = sys.modules.get(name)
    filename = getattr(module, "__file__", None) if module is not None else None
    if not isinstance(filename, str):
        filename = code.co_filename
    return not _library_file(filename)


def _namedtuple_new(globals_: dict[str, Any], name: str, code: types.CodeType) -> bool:
    """The ``__new__`` that ``collections.namedtuple`` makes with ``eval`` (a lambda of
    ``"<string>"`` in a namespace of its own, ``namedtuple_<typename>``): whoever defines the
    class, it only builds the tuple, ``tuple.__new__(cls, (fields...))``."""
    return (
        name.startswith("namedtuple_")
        and globals_.get("_tuple_new") is tuple.__new__
        and code.co_filename == "<string>"
        and code.co_names == ("_tuple_new",)
    )


@functools.lru_cache(maxsize=1024)
def _library_file(filename: str) -> bool:
    return os.path.realpath(filename).startswith(_LIBRARY_DIRS)


def program_frames(
    allowed: Iterable[types.CodeType] = (),
    also: Callable[[types.FrameType], bool] | None = None,
) -> Callable[[types.FrameType], bool]:
    """A ``Pending.calls_back`` test for a call modelled as a whole: a frame of the program's
    own code that it starts is a break (other than ``allowed``: code the model vouches for),
    and so is one the call's own test (``also``) says is a callback."""
    codes = frozenset(allowed)

    def calls_back(frame: types.FrameType) -> bool:
        if also is not None and also(frame):
            return True
        return frame.f_code not in codes and runs_program_code(frame)

    return calls_back
