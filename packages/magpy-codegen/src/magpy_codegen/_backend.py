"""The one adapter to torch's compilers (every private torch API MagPy uses lives here).

Backends: ``"inductor"`` (``torch._inductor.compile_fx.compile_fx``: C++ kernels on CPU, Triton
kernels for CUDA tensors), ``"eager"`` (run the fx graph as is), ``"aot_eager"`` (AOTAutograd with
no compiler: checks functionalization), or any callable with ``torch.compile``'s backend
signature ``(gm, example_inputs) -> callable``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.fx as fx

from magpy_refgraph import UnknownOptionError

__all__ = ["BACKENDS", "compile_graph", "resolve_backend"]

Backend = Callable[[fx.GraphModule, list[Any]], Callable[..., Any]]


def _eager(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    return gm.forward


def _inductor(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    from torch._inductor.compile_fx import compile_fx

    # without AOT-Inductor options compile_fx returns the compiled callable
    return cast(Callable[..., Any], compile_fx(gm, example_inputs))


def _aot_eager(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    from torch._dynamo.backends.registry import lookup_backend

    return lookup_backend("aot_eager")(gm, example_inputs)


BACKENDS: dict[str, Backend] = {"eager": _eager, "inductor": _inductor, "aot_eager": _aot_eager}


def resolve_backend(backend: str | Backend) -> Backend:
    """The backend callable for a name or callable; a clear error for anything else."""
    if callable(backend):
        return backend
    if isinstance(backend, str):
        try:
            return BACKENDS[backend]
        except KeyError:
            raise UnknownOptionError(
                f"backend {backend!r} unknown; choose one of {sorted(BACKENDS)} or pass a "
                "callable (gm, example_inputs) -> callable"
            ) from None
    raise TypeError(f"backend must be a str or a callable, got {type(backend).__name__}")


def compile_graph(
    graph: fx.Graph, example_inputs: list[Any], backend: str | Backend
) -> tuple[fx.GraphModule, Callable[..., Any]]:
    """Build the GraphModule of ``graph`` and compile it; returns (gm, callable)."""
    gm = fx.GraphModule(torch.nn.Module(), graph)
    compiled = resolve_backend(backend)(gm, list(example_inputs))
    return gm, compiled
