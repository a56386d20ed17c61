"""The operator graph being recorded: a ``torch.fx.Graph`` grown as tensor operations execute."""

from __future__ import annotations

import operator
import re
from typing import Any

import torch
import torch.fx as fx

from magpy_refgraph import Path, Unsupported

from .speculation import is_random
from .views import is_view

__all__ = [
    "FILL_METHODS",
    "GraphConstant",
    "GraphRecorder",
    "held_whole",
    "setitem",
    "unwrap_constants",
]

_NAME = re.compile(r"[^0-9a-zA-Z_]+")


class GraphConstant:
    """An argument of an operation that the graph's code cannot spell (a ``DeviceMesh``, a
    DTensor ``Placement``), guarded by whoever made it one (``registry.GRAPH_CONSTANT``).

    The recorder binds such arguments into the node's target (``_bind_constants``): the node
    calls a function that holds them and takes only the graph values.
    """

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __repr__(self) -> str:
        return f"GraphConstant({self.obj!r})"


def unwrap_constants(a: Any) -> Any:
    """``a`` with every ``GraphConstant`` in it (in lists, tuples, dicts) replaced by its object."""
    if type(a) is GraphConstant:
        return a.obj
    if type(a) in (list, tuple):
        return type(a)(unwrap_constants(x) for x in a)
    if type(a) is dict:
        return {k: unwrap_constants(x) for k, x in a.items()}
    return a


def held_whole(arg: dict[str, Any]) -> Any:
    """A dict argument (its items already arguments): held whole as a ``GraphConstant`` when no
    graph value is among them (fx prints a dict by ``repr``, which cannot spell every constant),
    else as it is (its constants bound by ``_bind_constants``)."""
    nodes: list[fx.Node] = []
    fx.node.map_arg(unwrap_constants(arg), nodes.append)
    return arg if nodes else GraphConstant(unwrap_constants(arg))


class _Slot:
    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


def _has_constant(a: Any) -> bool:
    if type(a) is GraphConstant:
        return True
    if type(a) in (list, tuple):
        return any(_has_constant(x) for x in a)
    if type(a) is dict:
        return any(_has_constant(x) for x in a.values())
    return False


def _bind_constants(
    op: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """``target(*args, **kwargs)`` with its ``GraphConstant`` arguments held by a new target
    function whose own arguments are the graph nodes only (in order of appearance)."""
    nodes: list[fx.Node] = []

    def hollow(a: Any) -> Any:
        if isinstance(a, fx.Node):
            nodes.append(a)
            return _Slot(len(nodes) - 1)
        if type(a) is GraphConstant:
            return a.obj
        if type(a) in (list, tuple):
            return type(a)(hollow(x) for x in a)
        if type(a) is dict:
            return {k: hollow(x) for k, x in a.items()}
        return a

    def fill(a: Any, values: tuple[Any, ...]) -> Any:
        if type(a) is _Slot:
            return values[a.index]
        if type(a) in (list, tuple):
            return type(a)(fill(x, values) for x in a)
        if type(a) is dict:
            return {k: fill(x, values) for k, x in a.items()}
        return a

    shape_args, shape_kwargs = hollow(args), hollow(kwargs)

    if op == "call_method":

        def bound(*values: Any) -> Any:
            a, kw = fill(shape_args, values), fill(shape_kwargs, values)
            return getattr(a[0], target)(*a[1:], **kw)

    else:

        def bound(*values: Any) -> Any:
            return target(*fill(shape_args, values), **fill(shape_kwargs, values))

    name = target if isinstance(target, str) else getattr(target, "__name__", "op")
    bound.__name__ = bound.__qualname__ = f"{_NAME.sub('_', str(name))}_with_constants"
    return bound, tuple(nodes), {}


class GraphRecorder:
    """Builds the fx graph of one record.

    Placeholders are created lazily, the first time an external tensor feeds an operation; each
    carries the entry ``Path`` it is read from. Operation nodes are added in execution order.
    Nodes whose target mutates an argument are marked ``meta['effect']`` so that dead-code
    elimination never drops them.
    """

    def __init__(self) -> None:
        self.graph = fx.Graph()
        self.input_paths: list[Path] = []
        self.example_inputs: list[torch.Tensor] = []
        self.op_count = 0
        self.created: list[fx.Node] = []
        # the texts of the warnings the operations being recorded issued, which the mock
        # replays: their nodes run quietly (``libs.stdlib.warnspy.quiet_nodes``)
        self.quiet: frozenset[str] | None = None
        self._insert_before: fx.Node | None = None
        self._targets: set[str] = set()

    def placeholder(self, path: Path, example: torch.Tensor) -> fx.Node:
        """A new graph input read from ``path`` (placeholders stay ahead of every operation)."""
        name = _NAME.sub("_", str(path)).strip("_") or "input"
        # fx names a placeholder's parameter after its target: two paths that read alike
        # (``x.a_b`` and ``x['a.b']``) must not give the forward a duplicate argument
        base, n = name, 1
        while name in self._targets:
            n += 1
            name = f"{base}_{n}"
        self._targets.add(name)
        first_op = next((n for n in self.graph.nodes if n.op != "placeholder"), None)
        if first_op is None:
            node = self.graph.placeholder(name)
        else:
            with self.graph.inserting_before(first_op):
                node = self.graph.placeholder(name)
        node.meta["example_value"] = example
        node.meta["path"] = path
        self.input_paths.append(path)
        self.example_inputs.append(example)
        return node

    def call(
        self,
        op: str,
        target: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        effect: bool = False,
    ) -> fx.Node:
        """Append one ``call_function``/``call_method`` node."""
        if any(isinstance(a, torch.Generator) for a in (*args, *kwargs.values())):
            # (a Generator cannot be a constant of the graph's code, nor restored on a miss)
            raise Unsupported("random numbers drawn from a torch.Generator the program passes")
        random = is_random(target, args, kwargs)
        if _has_constant(args) or _has_constant(kwargs):
            target, args, kwargs = _bind_constants(op, target, args, kwargs)
            op = "call_function"
        node = self.graph.create_node(op, target, args, kwargs)
        uninit = any(a.meta.get("uninit") for a in node.all_input_nodes)
        if uninit and not _fills(node) and not _fills_a_slice(node):
            self.graph.erase_node(node)
            raise Unsupported(
                "reads a tensor a legacy constructor left uninitialised (fill it first)"
            )
        sealed = next((a.meta["sealed"] for a in node.all_input_nodes if "sealed" in a.meta), None)
        if sealed is not None:  # (see _tensorattrs: a flag the mock sets after the graph)
            self.graph.erase_node(node)
            raise Unsupported(sealed)
        self.created.append(node)
        if is_view(target, args) and any(a.meta.get("copied_view") for a in node.all_input_nodes):
            node.meta["copied_view"] = True  # a view of a copied x[t]: a copy too
        node.meta["varies"] = random or any(_varies(a) for a in node.all_input_nodes)
        if _data_dependent_shape(node):
            node.meta["dyn_shape"] = True
        if effect:
            node.meta["effect"] = True
        if self.quiet:
            node.meta["quiet"] = self.quiet
        self.op_count += 1
        return node

    def getitem(self, node: fx.Node, index: int) -> fx.Node:
        """``node[index]`` for operations returning several tensors."""
        item = self.graph.call_function(operator.getitem, (node, index))
        if node.meta.get("copied_view"):  # an item of split(...) of a copied x[t]: a copy too
            item.meta["copied_view"] = True
        if _unchecked_shape(node):  # (``mask.nonzero(as_tuple=True)[0]``)
            item.meta["dyn_shape"] = True
        item.meta["varies"] = _varies(node)
        self.created.append(item)
        return item

    def truncate(self, n_created: int) -> None:
        """Erase every node created after the first ``n_created`` (a segment cut earlier)."""
        for node in reversed(self.created[n_created:]):
            if node.users:
                for user in list(node.users):
                    if user not in self.created[n_created:]:
                        raise RuntimeError("cannot cut the graph: a kept node uses a dropped one")
            self.graph.erase_node(node)
        del self.created[n_created:]

    def extract(self, start: int, end: int) -> fx.GraphModule | None:
        """A standalone copy of the operations created in ``[start, end)`` (``None``: none).

        Values from outside the slice become placeholders and every copied node is an output.
        Used to show the graph a callee's own segment will hold (``magpy.explain``).
        """
        nodes = [n for n in self.created[start:end] if n.graph is self.graph]
        if not any(n.op in ("call_function", "call_method") for n in nodes):
            return None
        graph = fx.Graph()
        env: dict[fx.Node, fx.Node] = {}
        inside = set(nodes)
        for n in nodes:
            for a in n.all_input_nodes:
                if a not in inside and a not in env:
                    env[a] = graph.placeholder(f"in_{len(env)}")
        for n in nodes:
            env[n] = graph.node_copy(n, env.__getitem__)
        graph.output(tuple(env[n] for n in nodes))
        return fx.GraphModule(torch.nn.Module(), graph)

    def finish(self, outputs: list[fx.Node]) -> fx.Graph:
        """Set the outputs and drop every node neither an output nor an effect depends on."""
        for out in outputs:
            if isinstance(out, fx.Node) and out.meta.get("no_output"):
                raise Unsupported(out.meta["no_output"])
        self.graph.output(tuple(outputs))
        live: set[fx.Node] = set()
        work = [n for n in self.graph.nodes if n.op == "output" or n.meta.get("effect")]
        while work:
            n = work.pop()
            if n in live:
                continue
            live.add(n)
            work.extend(n.all_input_nodes)
        for n in reversed(list(self.graph.nodes)):
            if n not in live and n.op not in ("placeholder", "output"):
                self.graph.erase_node(n)
        self.graph.lint()
        return self.graph

    def num_ops(self) -> int:
        """Operations currently in the graph (calls only)."""
        return sum(1 for n in self.graph.nodes if n.op in ("call_function", "call_method"))


# operations whose output shape is given by arguments: a tensor among them (a 0-d count,
# ``x.new_zeros(b, mask.sum(), d)``, ``torch.arange(n)``) makes the shape depend on tensor
# values. Those that take the tensor they shape first (a method's ``self`` included), then
# those made from sizes alone
_SIZED_AFTER_TENSOR = frozenset(
    "new_zeros new_ones new_empty new_full view reshape expand narrow repeat tile unflatten "
    "split chunk tensor_split topk kthvalue resize_ pad interpolate".split()
)
_SIZED_BY_ARGS = frozenset(
    "zeros ones empty full rand randn randint arange range linspace logspace".split()
)

_DATA_DEPENDENT = frozenset(
    "nonzero unique unique_consecutive masked_select argwhere nonzero_static bincount "
    "repeat_interleave histc combinations".split()
)


def setitem(tensor: torch.Tensor, index: Any, value: Any) -> torch.Tensor:
    """``tensor[index] = value``, giving ``tensor``: the graph's node for a STORE_SUBSCR on a
    tensor. Later operations take the updated tensor from this node, so the node must stand
    for it: ``operator.setitem`` gives None, which the fx interpreter that AOTAutograd and
    Inductor trace with would pass on (``cumsum(None)``)."""
    tensor[index] = value
    return tensor


# in-place methods that overwrite every element of their first argument (a tensor a legacy
# constructor left uninitialised is filled by one: ``torch.Tensor(n, m).fill_(v)``)
FILL_METHODS = frozenset(
    "fill_ zero_ copy_ normal_ uniform_ random_ bernoulli_ exponential_ geometric_ cauchy_ "
    "log_normal_".split()
)


def _fills(node: fx.Node) -> bool:
    """``node`` overwrites every element of its first argument and reads no other
    uninitialised tensor (``torch.Tensor(n, m).fill_(v)``)."""
    if node.op != "call_method" or node.target not in FILL_METHODS or not node.args:
        return False
    first = node.args[0]
    return not any(a.meta.get("uninit") for a in node.all_input_nodes if a is not first)


def _fills_a_slice(node: fx.Node) -> bool:
    """``x[..., k] = v`` on a tensor a legacy constructor left uninitialised: one index of one
    dim filled. The node carries what is left (``meta['uninit']``: dim and indices) until every
    index of that dim is; True when the node is such a write."""
    if node.op != "call_function" or node.target is not setitem or len(node.args) != 3:
        return False
    dst, index, _value = node.args
    if not isinstance(dst, fx.Node) or "uninit_shape" not in dst.meta:
        return False
    if any(a.meta.get("uninit") for a in node.all_input_nodes if a is not dst):
        return False
    shape = dst.meta["uninit_shape"]
    hit = _one_index(index, shape)
    state = dst.meta["uninit"]
    if hit is None or (state is not True and state[0] != hit[0]):
        return False
    dim, k = hit
    left = set(range(shape[dim])) if state is True else set(state[1])
    left.discard(k)
    node.meta["uninit_shape"] = shape
    if left:
        node.meta["uninit"] = (dim, frozenset(left))
        node.meta["no_output"] = dst.meta.get("no_output")
    return True


def _one_index(index: object, shape: tuple[int, ...]) -> tuple[int, int] | None:
    """``(dim, k)`` when ``index`` selects index ``k`` of one dim and all of the others
    (``[..., k]``, ``[:, k]``, ``[k]``)."""
    idx = index if isinstance(index, tuple) else (index,)
    explicit = [i for i in idx if i is not Ellipsis]
    if len(idx) - len(explicit) > 1 or len(explicit) > len(shape):
        return None
    full: list[object] = []
    for i in idx:
        full += [slice(None)] * (len(shape) - len(explicit)) if i is Ellipsis else [i]
    full += [slice(None)] * (len(shape) - len(full))
    ints = [(d, i) for d, i in enumerate(full) if type(i) is int]
    if len(ints) != 1 or any(type(i) is not int and i != slice(None) for i in full):
        return None
    dim, k = ints[0]
    assert isinstance(k, int)
    return (dim, k % shape[dim]) if -shape[dim] <= k < shape[dim] else None


def _data_dependent_shape(node: fx.Node) -> bool:
    """True when the node's output shape may depend on tensor *values* (not only shapes)."""
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    if _in_place(node, name):  # the shape of the tensor written into, whatever the index
        return isinstance(node.args[0], fx.Node) and _unchecked_shape(node.args[0])
    if any(_unchecked_shape(a) for a in node.all_input_nodes):
        return True
    if name in _DATA_DEPENDENT:
        return True
    if name == "where" and len(node.args) + len(node.kwargs) == 1:
        return True
    if name in ("getitem", "__getitem__") and len(node.args) > 1:
        return _has_mask_index(node.args[1]) or _has_tensor_bound(node.args[1])
    if name in _SIZED_AFTER_TENSOR or name in _SIZED_BY_ARGS:
        skip = 1 if name in _SIZED_AFTER_TENSOR else 0
        return _holds_tensor_value((*node.args[skip:], *node.kwargs.values()))
    return False


_IN_PLACE_OPERATORS = frozenset(
    "iadd isub imul imatmul itruediv ifloordiv imod ipow iand ior ixor ilshift irshift".split()
)


def _in_place(node: fx.Node, name: str) -> bool:
    """``node`` writes into its first argument and gives it back (``x[i] = v``, ``x.add_(y)``,
    ``x += y``): its shape is that argument's."""
    if not node.args:
        return False
    if node.target is setitem or name in _IN_PLACE_OPERATORS:
        return True
    return (
        node.op == "call_method"
        and name.endswith("_")
        and not name.endswith("__")
        and name != "resize_"
    )


def _unchecked_shape(node: fx.Node) -> bool:
    """``node``'s shape depends on tensor values and no assumption checks it (once one does,
    ``speculation.assume_shape``, what is computed from it has shapes the graph can know)."""
    return bool(node.meta.get("dyn_shape")) and not node.meta.get("shape_checked")


def _holds_tensor_value(args: object) -> bool:
    """A tensor among ``args`` (nested in tuples and lists) whose value may change from call
    to call: computed from the graph's inputs, or drawn at random. (A symbolic size is no
    tensor; ``torch.div(16, 4, rounding_mode="trunc")`` of static sizes is the same on every
    call.)"""
    if isinstance(args, fx.Node):
        return args.meta.get("dtype") is not None and _varies(args)
    if isinstance(args, tuple | list):
        return any(_holds_tensor_value(a) for a in args)
    return False


def _varies(node: fx.Node) -> bool:
    """``node`` reads a graph input, or draws random numbers, directly or through its args
    (set as each node is recorded; a node made otherwise is taken to vary)."""
    return bool(node.meta.get("varies", True))


def _has_tensor_bound(index: object) -> bool:
    """A slice bounded by a tensor's value (``x[:mask.sum()]``) in ``index``."""
    if isinstance(index, slice):
        return _holds_tensor_value((index.start, index.stop, index.step))
    if isinstance(index, tuple | list):
        return any(_has_tensor_bound(i) for i in index)
    return False


def _has_mask_index(index: object) -> bool:
    if isinstance(index, fx.Node):
        return index.meta.get("dtype") in (torch.bool, torch.uint8)
    if isinstance(index, tuple | list):
        return any(_has_mask_index(i) for i in index)
    return False
