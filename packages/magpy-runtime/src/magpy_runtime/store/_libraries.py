"""Stored records' graphs as libraries (AOTInductor), for ``_store``: which records get one,
building it on MagPy's worker thread, finding it in an entry, and loading it.

A stored record of the ``"inductor"`` backend whose graph a shared library runs exactly
(``magpy_codegen.native_problem``: CPU tensors in and out, no updates in place, no random draws,
no autograd) gets its graph compiled ahead of time on MagPy's worker thread, after its entry is
written; ``_store`` then writes the entry again with the library after the content, its size
and the platform it was made for (``native_platform``: architecture, CPU features, torch's
threads) in the header, which the entry's SHA-256 covers. A process that loads the entry on
the same platform runs the library (torch's C++ runner: ~1 ms to load, Inductor not imported);
on another platform, or when loading fails, the record's graph is compiled by Inductor as
without a library.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.fx as fx

from magpy_codegen import (
    CompileJob,
    NativeGraph,
    compile_native,
    load_native,
    native_platform,
    native_problem,
    submit,
)

from .._config import config
from .._logging import log_topic
from .._owner import RecordOwner
from ._entryfiles import warn_once
from ._persist import decode_graph

__all__ = ["Prebuilt", "build_library", "library_examples", "loaded_library", "split_library"]

Library = tuple[bytes, dict[str, Any]]  # (the shared library, the platform it was made for)


def library_examples(state: RecordOwner, result: Any) -> list[Any] | None:
    """The graph inputs to compile ``result``'s graph into a library for (None: it gets none:
    not an Inductor record, libraries off, or a graph a library would not run exactly)."""
    if state.backend != "inductor" or not config.records_native:
        return None
    capture = result.capture
    problem = native_problem(
        result.graph,
        result.example_inputs,
        grad_enabled=capture.grad_enabled,
        updates_inputs=bool(capture.mutated_inputs),
        draws_random=bool(capture.draws_random),
    )
    if problem is not None:
        log_topic("records", "record of %s stored without a library: %s", state.qualname, problem)
        return None
    return list(result.example_inputs)


def build_library(
    qualname: str, rows: Any, examples: list[Any], done: Callable[[Library], None]
) -> None:
    """Compile the stored graph ``rows`` (``_persist.encode_graph``) into a library for
    ``examples`` on MagPy's worker thread; ``done(library)`` there once it is built and checked
    (not after a failure, said in the log, nor after ``magpy.reset``)."""

    def compile() -> Callable[[], None] | str:
        made_for = native_platform()
        data = compile_native(decode_graph(rows), examples)
        if isinstance(data, str):
            return data
        return lambda: done((data, made_for))

    def failed(reason: str) -> None:  # (a library that fails its check, or a failed compile)
        warn_once(f"a record's library was not kept: {reason}", qualname)

    submit(CompileJob(f"library of {qualname}", compile, failed, None))


def split_library(header: dict[str, Any], payload: bytes) -> tuple[bytes, bytes | None] | None:
    """An entry's ``payload`` split into its content and the library after it (None: the
    header does not describe the payload)."""
    native = header.get("native")
    if native is None:
        return payload, None
    size = native.get("bytes") if isinstance(native, dict) else None
    if type(size) is not int or not 0 < size < len(payload) or native.get("runner") != "cpu":
        return None
    return payload[:-size], payload[-size:]


def loaded_library(name: str, header: dict[str, Any], data: bytes) -> NativeGraph | None:
    """The library ``data`` of entry ``name`` loaded, or None (made for another platform, said
    in the log; or it failed to load, said once as a warning)."""
    made_for = header["native"].get("platform")
    if made_for != native_platform():
        log_topic("records", "%s: its library was made for %s", name, made_for)
        return None
    try:
        return load_native(data)
    except Exception as exc:  # (the record is compiled as without it)
        warn_once(f"its library cannot be loaded: {type(exc).__name__}: {exc}", name)
        return None


class Prebuilt:
    """The backend of a record whose graph comes compiled: a library loaded from its entry."""

    def __init__(self, graph: NativeGraph) -> None:
        self.graph = graph

    def __call__(self, gm: fx.GraphModule, example_inputs: list[Any]) -> NativeGraph:
        return self.graph
