"""Graphs compiled ahead of time into a shared library (AOTInductor) that a later process loads
without Inductor: what a persistent record keeps of its compiled graph
(``magpy_runtime.store._store``).

Loading a record's graph through Inductor's caches still imports Inductor, builds a ShapeEnv
and probes the C++ compiler (seconds: most of a warm start). A library AOTInductor made from the
same fx graph is loaded by torch's own C++ runner (``torch._C._aoti``, part of ``import torch``)
in about a millisecond, and runs the same Inductor kernels.

Only graphs whose meaning a library keeps exactly are compiled so (``native_problem``): CPU
tensors in, tensors out, no input updated in place, no random draws, no autograd (a library
returns tensors without a ``grad_fn``), no symbolic sizes. ``compile_native`` then checks the
library on the recording call's inputs against the graph run as is (shapes, strides, dtypes,
values to Inductor's tolerance, outputs that alias nothing), and refuses it otherwise.

A library is made for the machine that compiled it: Inductor picks the vector instructions of
its CPU and fixes the number of OpenMP threads of each parallel loop. ``native_platform()``
says both (with the architecture); a library whose platform is not this process's is not
loaded (it could stop the process with an illegal instruction, or run with other threads).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx

from magpy_monitor import FAKE

from ._backend import _torch_compiler

__all__ = ["NativeGraph", "compile_native", "load_native", "native_platform", "native_problem"]

_TENSORS = (torch.Tensor, torch.nn.Parameter)


def native_problem(
    graph: fx.Graph,
    example_inputs: Sequence[Any],
    *,
    grad_enabled: bool,
    updates_inputs: bool,
    draws_random: bool,
) -> str | None:
    """Why ``graph`` cannot be kept as a library (None: it can)."""
    if updates_inputs:
        return "it updates inputs in place"
    if draws_random:
        return "it draws random numbers"
    for value in example_inputs:
        if type(value) not in _TENSORS or value.layout != torch.strided:
            return f"a graph input of type {type(value).__qualname__}"
        if value.device.type != "cpu":
            return f"a graph input on {value.device}"
        if grad_enabled and value.requires_grad:
            return "it records autograd history"
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    results = output.args[0]
    if not isinstance(results, (tuple, list)) or not results:
        return "its output is not a tuple of tensors"
    for result in results:
        if not isinstance(result, fx.Node) or result.op == "placeholder":
            return "an output is not a tensor the graph computes"
        fake = result.meta.get(FAKE, result.meta.get("example_value"))
        if fake is not None and not isinstance(fake, torch.Tensor):
            return "an output is not a tensor"
    for node in graph.nodes:
        if node.op == "call_function" and node.target is torch.autograd.grad:
            return "it runs backward"
    return None


@functools.cache
def _cpu_flags() -> str:
    """A digest of this CPU's feature flags (``/proc/cpuinfo``; the processor's name where
    there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as file:
            for line in file:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    flags = " ".join(sorted(value.split()))
                    return hashlib.sha256(flags.encode()).hexdigest()[:16]
    except OSError:
        pass
    return platform.processor() or "unknown"


def native_platform() -> dict[str, Any]:
    """What a library made now is made for: architecture, CPU features, torch's threads."""
    return {"machine": platform.machine(), "cpu": _cpu_flags(), "threads": torch.get_num_threads()}


def _fresh_module(graph: fx.Graph) -> fx.GraphModule:
    """A GraphModule of a copy of ``graph`` without node metadata (fake tensors of the
    recording call's fake mode would clash with the mode AOTInductor traces in)."""
    copied = fx.Graph()
    out = copied.graph_copy(graph, {})
    copied.output(out)
    for node in copied.nodes:
        node.meta = {}
    return fx.GraphModule(torch.nn.Module(), copied)


def compile_native(graph: fx.Graph, example_inputs: Sequence[Any]) -> bytes | str:
    """The library of ``graph`` compiled for ``example_inputs``, or why not (it failed, or it
    does not give what the graph run as is gives on them)."""
    _torch_compiler("inductor")  # (imports Inductor)
    gm = _fresh_module(graph)
    inputs = tuple(example_inputs)
    with tempfile.TemporaryDirectory(prefix="magpy-native-") as where:
        target = os.path.join(where, "graph.so")
        with torch.no_grad():
            path = torch._inductor.aot_compile(
                gm, inputs, options={"aot_inductor.output_path": target}
            )
        if not isinstance(path, str) or not os.path.isfile(path):
            return f"AOTInductor gave {type(path).__name__}, not a library"
        data = Path(path).read_bytes()
    problem = _differs(load_native(data), gm, inputs)
    return data if problem is None else problem


def _differs(native: NativeGraph, gm: fx.GraphModule, inputs: tuple[Any, ...]) -> str | None:
    with torch.no_grad():
        want = gm(*inputs)
        got = native(*inputs)
    if len(got) != len(want):
        return f"the library gives {len(got)} outputs, the graph {len(want)}"
    storages = {t.untyped_storage().data_ptr() for t in inputs}
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if not isinstance(w, torch.Tensor):
            return f"output {i} is not a tensor"
        pointer = w.untyped_storage().data_ptr()
        if pointer in storages and w.untyped_storage().nbytes():
            return f"output {i} shares memory with an input or another output"
        storages.add(pointer)
        if (g.shape, g.stride(), g.dtype) != (w.shape, w.stride(), w.dtype):
            return f"output {i} has another shape, stride or dtype than the graph's"
        exact = not (w.is_floating_point() or w.is_complex())
        if not (torch.equal(g, w) if exact else torch.allclose(g, w, 1e-3, 1e-4, equal_nan=True)):
            return f"output {i} differs from the graph's"
    return None


class NativeGraph:
    """A loaded library: called with the graph's inputs, returns its outputs (a list)."""

    __slots__ = ("_run", "runner")

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self._run = runner.run

    def __call__(self, *inputs: Any) -> list[torch.Tensor]:
        return self._run(inputs)

    def __repr__(self) -> str:
        return "<NativeGraph (AOTInductor)>"


def load_native(data: bytes) -> NativeGraph:
    """The library in ``data`` loaded (written to a private temporary file for the loader, which
    is deleted once loaded)."""
    with tempfile.TemporaryDirectory(prefix="magpy-native-") as where:
        path = os.path.join(where, "graph.so")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        return NativeGraph(torch._C._aoti.AOTIModelContainerRunnerCpu(path, 1))
