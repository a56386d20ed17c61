"""Graphs Inductor has nothing to gain on: they run as is instead of being compiled.

A compiler earns its cost by fusing operators into fewer kernels. A graph whose only work is
one operator (``policy[:, i].any()`` before a data-dependent branch, the ``new_zeros`` that
start a loop's state) has nothing to fuse: Inductor would emit one kernel that does what the
ATen operator does, after about half a second of compiling (more with symbolic sizes), and its
wrapper costs about as much per call as running the graph's few nodes. Programs split at
graph breaks have many such graphs, so ``"inductor"`` runs them as is (``nothing_to_fuse``).

What does not count as work: views (what ATen's schemas say may return an alias of its
input, ``magpy_monitor.is_view``: ``view``, ``transpose``, ``x.T``, ``x[:, i]`` without tensor
indices; those that copy where they cannot alias, ``reshape``, ``to``, ``einsum``, count too:
running a graph as is never changes its result) and metadata (``size()``, picking an item of a
tuple an operator returned), and tensors made from nothing but a shape (``new_zeros``,
``torch.ones``). A graph that updates a tensor in place, runs a backward or calls a module is
never taken for one: those keep the compiler's path.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

from magpy_monitor import is_view

__all__ = ["nothing_to_fuse"]

# metadata reads (views are ``magpy_monitor.is_view``'s, read from ATen's schemas)
_METADATA_NAMES = frozenset({"dim", "numel", "size", "stride"})
_MADE_NAMES = frozenset(
    {
        "empty", "empty_like", "full", "full_like", "new_empty", "new_full", "new_ones",
        "new_zeros", "ones", "ones_like", "zeros", "zeros_like",
    }
)  # fmt: skip
_FREE_NAMES = _METADATA_NAMES | _MADE_NAMES
# at most this many operators that do work: one kernel, nothing to fuse it with
_MAX_WORK = 1


def nothing_to_fuse(graph: fx.Graph) -> bool:
    """Whether ``graph`` does at most one operator's work besides views and tensors made from
    a shape (see the module's docstring)."""
    work = 0
    for node in graph.nodes:
        if node.op == "call_module":
            return False
        if node.op not in ("call_function", "call_method"):
            continue
        if node.target is torch.autograd.grad or _updates_in_place(node):
            return False
        if not _free(node):
            work += 1
            if work > _MAX_WORK:
                return False
    return True


def _free(node: fx.Node) -> bool:
    if node.target is operator.getitem:
        # an item of an operator's tuple, or basic indexing of a tensor (a view); an index
        # that holds a node (a tensor index, or a symbolic one) gathers: work
        nodes: list[fx.Node] = []
        fx.node.map_arg(node.args[1:], nodes.append)
        return not nodes
    return is_view(node.target, node.args) or _name(node) in _FREE_NAMES


def _updates_in_place(node: fx.Node) -> bool:
    name = _name(node)
    return (name.endswith("_") and not name.endswith("__")) or node.kwargs.get("inplace") is True


def _name(node: fx.Node) -> str:
    target = node.target
    return target if isinstance(target, str) else getattr(target, "__name__", "")
