"""Regional compilation: each call of a ``torch.compiler.nested_compile_region`` function,
outlined into one ``invoke_subgraph`` of a subgraph that identical calls share.

The monitor marks the nodes each call made (node meta ``magpy_monitor.REGION``). For Inductor
and AOTAutograd, ``outline_regions`` gives a copy of the graph where each marked call's nodes
are one ``torch.ops.higher_order.invoke_subgraph(subgraph, identifier, *operands)`` node (and
an ``operator.getitem`` per value used after the call), as TorchDynamo writes it. The operands
are the values flowing into the call's nodes (graph inputs, parameters among them, or values
computed before it), in order of first use; the outputs are its values used after it. Calls
whose subgraphs are the same (same operations, constants, and operand metadata: shape, stride,
dtype, device, requires_grad, which operands share storage) share one submodule and one
identifier, so AOTAutograd traces it, and Inductor compiles it, once.

A call stays inline (as without the mark: same values, no reuse), its reason logged on the
``magpy.regions`` logger and kept in ``gm.meta[OUTLINED]``, when outlining could change what
it computes or the subgraph's contract does not allow it: it updates a tensor in place, draws
random numbers, has an output shape that depends on tensor values, takes or gives a value that
is not a tensor, gives a tensor sharing storage with an operand or another output, or a value
it gives is used between its own nodes. A graph the backend fails to compile outlined is
compiled inline (``compile_outlined``; ``compile_graph`` too where the outlined graph could only
run as is). A training step's graph (its backward in it, ``_joint``) is outlined as well: the
joint trace goes through each ``invoke_subgraph``'s autograd.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx
from torch._higher_order_ops.invoke_subgraph import invoke_subgraph
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.multiprocessing.reductions import StorageWeakRef

from magpy_monitor import REGION, is_random

__all__ = ["OUTLINED", "compile_outlined", "outline_regions"]

OUTLINED = "magpy_regions"  # GraphModule meta: what became of each marked call
log = logging.getLogger("magpy.regions")

_PLAIN = (int, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


def compile_outlined(
    gm: fx.GraphModule,
    example_inputs: list[Any],
    compile: Callable[[fx.GraphModule, list[Any]], Any],
    outline: bool,
) -> tuple[fx.GraphModule, Any]:
    """``compile(gm, example_inputs)``, with ``gm``'s marked calls outlined where ``outline``
    (a backend that compiles ``invoke_subgraph``: Inductor, AOTAutograd) and they can be; the
    graph as it is where the backend fails on the outlined one. Returns (the graph compiled,
    its compiled callable)."""
    outlined = outline_regions(gm, example_inputs) if outline else None
    if outlined is None:
        return gm, compile(gm, example_inputs)
    try:
        return outlined, compile(outlined, example_inputs)
    except Exception as exc:
        reason = f"the backend failed on the outlined graph: {type(exc).__name__}: {exc}"[:300]
        log.debug("regions inlined: %s", reason)
        gm.meta[OUTLINED] = [f"all inlined ({reason})"]
        return gm, compile(gm, example_inputs)


def outline_regions(gm: fx.GraphModule, example_inputs: list[Any]) -> fx.GraphModule | None:
    """A copy of ``gm`` with each marked call that can be outlined outlined (None: no call is
    marked, or none can be; the reasons are in ``gm.meta[OUTLINED]``)."""
    if not any(REGION in n.meta for n in gm.graph.nodes):
        return None
    graph = fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    new = fx.GraphModule(gm, graph)
    values = _fake_values(new, example_inputs)
    report: list[str] = []
    shared: dict[Any, str] = {}
    for name, nodes in _regions(graph).values():
        plan = _plan(graph, nodes, values) if values is not None else "shapes unknown"
        if isinstance(plan, str):
            report.append(f"{name}: inlined ({plan})")
            log.debug("region %s inlined: %s", name, plan)
            continue
        inputs, outputs = plan
        key = _key(nodes, inputs, outputs, values or {})
        attr = shared.get(key)
        if attr is None:
            attr = shared[key] = f"magpy_region_{len(shared)}"
            new.add_submodule(attr, _subgraph(nodes, inputs, outputs))
        _replace(graph, attr, nodes, inputs, outputs, values or {})
        report.append(f"{name}: {attr}")
    gm.meta[OUTLINED] = report
    if not shared:
        return None
    new.recompile()
    new.meta[OUTLINED] = report
    return new


def _regions(graph: fx.Graph) -> dict[int, tuple[str, list[fx.Node]]]:
    """Each marked call's (function name, nodes in graph order), in order of first node."""
    found: dict[int, tuple[str, list[fx.Node]]] = {}
    for n in graph.nodes:
        mark = n.meta.get(REGION)
        if mark is not None:
            found.setdefault(mark[0], (mark[1], []))[1].append(n)
    return found


class _Values(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__(gm)
        self.seen: dict[fx.Node, Any] = {}

    def run_node(self, n: fx.Node) -> Any:
        out = super().run_node(n)
        self.seen[n] = out
        return out


def _fake_values(gm: fx.GraphModule, inputs: list[Any]) -> dict[fx.Node, Any] | None:
    """Every node's value, computed on fake tensors (None: the graph does not run on them)."""
    mode = next((t.fake_mode for t in inputs if isinstance(t, FakeTensor)), None)
    if mode is None:
        env = torch.fx.experimental.symbolic_shapes.ShapeEnv()
        mode = FakeTensorMode(shape_env=env, static_shapes=True, allow_non_fake_inputs=True)
    fakes = [
        mode.from_tensor(t) if isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor) else t
        for t in inputs
    ]
    values = _Values(gm)
    grad_mode = torch.is_grad_enabled()
    try:
        with mode:
            values.run(*fakes)
    except Exception as exc:
        log.debug("regions inlined: the graph does not run on fake tensors: %s", exc)
        return None
    finally:
        torch._C._set_grad_enabled(grad_mode)
    return values.seen


def _refusal(n: fx.Node) -> str | None:
    if n.op not in ("call_function", "call_method"):
        return f"holds a {n.op} node"
    if n.meta.get("effect"):
        return "updates a tensor in place"
    if n.meta.get("dyn_shape"):
        return "an output shape depends on tensor values"
    if is_random(n.target, n.args, n.kwargs):
        return "draws random numbers"
    return None


def _plan(
    graph: fx.Graph, nodes: list[fx.Node], values: dict[fx.Node, Any]
) -> tuple[list[fx.Node], list[fx.Node]] | str:
    """(operands, outputs) of one marked call, or why it stays inline."""
    inside = set(nodes)
    inputs: dict[fx.Node, None] = {}
    for n in nodes:
        why = _refusal(n)
        if why is not None:
            return why
        inputs.update((a, None) for a in n.all_input_nodes if a not in inside)
    order = {n: i for i, n in enumerate(graph.nodes)}
    last = order[nodes[-1]]
    outputs = [n for n in nodes if any(u not in inside for u in n.users)]
    if not outputs:
        return "gives nothing used after it"
    if any(order[u] < last for n in outputs for u in n.users if u not in inside):
        return "a value it gives is used between its own operations"
    got = [values.get(n) for n in [*inputs, *outputs]]
    given = [v for v in got if isinstance(v, FakeTensor)]
    if len(given) < len(got):
        odd = next(type(v).__name__ for v in got if not isinstance(v, FakeTensor))
        return f"takes or gives a {odd}, not a tensor"
    storages = [StorageWeakRef(v.untyped_storage()) for v in given]
    if len(set(storages[len(inputs) :])) < len(outputs) or set(storages[: len(inputs)]) & set(
        storages[len(inputs) :]
    ):
        return "gives a tensor sharing storage with an operand or another output"
    return list(inputs), outputs


def _key(
    nodes: list[fx.Node],
    inputs: list[fx.Node],
    outputs: list[fx.Node],
    values: dict[fx.Node, Any],
) -> Any:
    """What makes two calls' subgraphs the same: operations, constants, operand metadata."""
    index: dict[fx.Node, tuple[str, int]] = {n: ("in", i) for i, n in enumerate(inputs)}
    index.update((n, ("op", i)) for i, n in enumerate(nodes))

    def norm(a: Any) -> Any:
        if isinstance(a, fx.Node):
            return index[a]
        if isinstance(a, list | tuple):  # (fx's immutable_list, torch.Size: by type name)
            return (type(a).__name__, *map(norm, a))
        if isinstance(a, dict):
            return ("dict", *((k, norm(v)) for k, v in a.items()))
        if type(a) is slice:
            return ("slice", norm(a.start), norm(a.stop), norm(a.step))
        if type(a) is float:  # (by repr: -0.0 == 0.0, and nan is equal to nothing)
            return ("float", repr(a))
        if type(a) in _PLAIN or a is Ellipsis:
            return (type(a).__name__, a)
        return ("object", id(a))  # (held by the graph while it compiles)

    ops = tuple(
        (n.op, n.target if type(n.target) is str else id(n.target), norm(n.args), norm(n.kwargs))
        for n in nodes
    )
    storages: list[Any] = []
    metas = []
    for n in inputs:
        t = values[n]
        ref = StorageWeakRef(t.untyped_storage())
        shared = storages.index(ref) if ref in storages else len(storages)
        storages.append(ref)
        metas.append(
            (
                tuple(map(str, t.shape)),
                tuple(map(str, t.stride())),
                str(t.storage_offset()),
                t.dtype,
                t.device,
                t.requires_grad,
                shared,
            )
        )
    return ops, tuple(metas), tuple(index[n] for n in outputs)


def _subgraph(
    nodes: list[fx.Node], inputs: list[fx.Node], outputs: list[fx.Node]
) -> fx.GraphModule:
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for i, n in enumerate(inputs):
        env[n] = graph.placeholder(f"arg{i}")
    for n in nodes:
        env[n] = graph.node_copy(n, env.__getitem__)
    graph.output(tuple(env[n] for n in outputs))
    return fx.GraphModule(torch.nn.Module(), graph)


def _replace(
    graph: fx.Graph,
    attr: str,
    nodes: list[fx.Node],
    inputs: list[fx.Node],
    outputs: list[fx.Node],
    values: dict[fx.Node, Any],
) -> None:
    """The call's nodes replaced by ``invoke_subgraph`` of submodule ``attr`` (after them);
    each output's value is its ``getitem``'s (a later call may take it)."""
    inside = set(nodes)
    with graph.inserting_after(nodes[-1]):
        sub = graph.get_attr(attr)
    with graph.inserting_after(sub):
        call = graph.call_function(invoke_subgraph, (sub, attr, *inputs))
    last = call
    for i, n in enumerate(outputs):
        with graph.inserting_after(last):
            last = graph.call_function(operator.getitem, (call, i))
        last.meta.update((k, v) for k, v in n.meta.items() if k != REGION)
        values[last] = values[n]
        n.replace_all_uses_with(last, delete_user_cb=lambda u: u not in inside)
    for n in reversed(nodes):
        graph.erase_node(n)
