"""Which of a graph's in-place updated inputs a failed run of it must put back.

A record's mock runs the graph on a hit; when the graph raises (an index out of range, the
program's own error), what it changed is put back and the program runs natively for that call, so
the error comes with eager's effects. Copying every updated input before every run is what that
costs: a whole training step copies all parameters and optimizer state each step.

An update need not be copied when it cannot have happened before any operation that may raise:
when it depends (through the graph's data flow) on every such operation, a raise stops the graph
before the update is computed, whatever order a compiler picks. Which operations may raise on a
hit is decided by name: the record's guard holds the shapes, dtypes and devices, so the
operations below cannot fail on values; any other one may (``embedding``, ``cross_entropy``,
``gather``, advanced indexing, a user's allowed-in-graph function). A listed operation may still
fail on values with some arguments: ``div`` with a ``rounding_mode`` over integers raises on a
zero divisor (``ZeroDivisionError``), so it counts as one that may raise unless its result is a
floating-point tensor (which gives ``inf``/``nan`` there instead).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx

from .joined import storage_key

if TYPE_CHECKING:
    from .capture import Capture

# torch functions and tensor methods that fail only on what the guard fixes (shapes, dtypes,
# devices), never on tensor values; an in-place form (``add_``) is its name without the "_"
_CANNOT_RAISE = frozenset(
    """
    abs neg add sub rsub mul div true_divide pow sqrt rsqrt square reciprocal exp exp2 expm1 log
    log1p log2 log10 sin cos tan tanh sigmoid logsigmoid relu relu6 gelu silu mish elu selu celu
    leaky_relu hardtanh hardswish hardsigmoid softplus softsign tanhshrink threshold glu prelu
    softmax log_softmax clamp clamp_min clamp_max clip where masked_fill lerp addcmul addcdiv
    addmm addmv addbmm baddbmm mm bmm mv matmul outer einsum linear bilinear conv1d conv2d conv3d
    conv_transpose1d conv_transpose2d conv_transpose3d batch_norm layer_norm group_norm
    instance_norm rms_norm local_response_norm normalize dropout dropout1d dropout2d dropout3d
    alpha_dropout feature_alpha_dropout max_pool1d max_pool2d max_pool3d avg_pool1d avg_pool2d
    avg_pool3d adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool1d
    adaptive_max_pool2d adaptive_max_pool3d scaled_dot_product_attention view reshape permute
    transpose t contiguous flatten unflatten unsqueeze squeeze expand expand_as view_as
    reshape_as repeat cat concat concatenate stack hstack vstack split chunk unbind narrow
    select movedim sum mean var std var_mean std_mean prod amax amin max min maximum minimum
    norm sign floor ceil round trunc frac erf erfc to float half bfloat16 double type_as detach
    clone copy zero fill zeros_like ones_like empty_like full_like new_zeros new_ones new_empty
    new_full rand_like randn_like mse_loss l1_loss smooth_l1_loss huber_loss
    binary_cross_entropy_with_logits cosine_similarity eq ne lt le gt ge logical_and logical_or
    logical_not logical_xor bitwise_and bitwise_or bitwise_not bitwise_xor all any cumsum
    cumprod flip roll tril triu isnan isinf isfinite nan_to_num atan atan2 asin acos sinh cosh
    asinh acosh atanh lower_version settle_version as_grad_layout _getitem grad _set_grad_enabled
    _foreach_add _foreach_sub _foreach_mul _foreach_div _foreach_addcmul _foreach_addcdiv
    _foreach_lerp _foreach_sqrt _foreach_neg _foreach_maximum _foreach_norm _foreach_copy
    _foreach_zero _foreach_pow _foreach_reciprocal _foreach_sign _foreach_abs _foreach_exp
    _foreach_clamp_min _foreach_clamp_max
    """.split()
)
# Python operators over tensors (and promoted scalars) that cannot raise on values
_SAFE_OPERATORS = frozenset(
    {
        operator.add, operator.sub, operator.mul, operator.truediv, operator.neg, operator.pos,
        operator.pow, operator.matmul, operator.iadd, operator.isub, operator.imul,
        operator.itruediv, operator.ipow, operator.eq, operator.ne, operator.lt, operator.le,
        operator.gt, operator.ge, operator.and_, operator.or_, operator.xor, operator.invert,
        operator.abs,
    }
)  # fmt: skip


#: how a backend applies a graph's in-place updates (``undo_inputs``'s ``rule``): "order",
#: one by one in the graph's order (the fx graph run as it is); "final", only each input's final
#: value is written (a functionalizing compiler: AOTAutograd, Inductor); "flow", any order the
#: data flow allows, intermediate values included (a backend MagPy does not know)
UPDATE_RULES = ("order", "final", "flow")


def undo_inputs(
    graph: fx.Graph, mutated: Iterable[int], keys: dict[int, Any], rule: str = "flow"
) -> tuple[int, ...]:
    """The inputs of ``mutated`` (placeholder indices) a failed run must put back: those some
    update may have written before a raising operation stopped the graph.

    ``keys``: placeholder index -> storage key of the input; each update node's
    ``meta["updates"]`` holds the keys it writes. ``rule``: one of ``UPDATE_RULES``."""
    if rule not in UPDATE_RULES:
        raise ValueError(f"rule must be one of {UPDATE_RULES}, got {rule!r}")
    mutated = tuple(mutated)
    raising: list[fx.Node] = []
    behind: dict[fx.Node, int] = {}  # node -> bit set of the raising nodes it depends on
    writers: dict[Any, list[fx.Node]] = {}
    for node in graph.nodes:
        behind[node] = _ahead(node, behind)
        for key in node.meta.get("updates", ()):
            writers.setdefault(key, []).append(node)
        if node.op in ("call_function", "call_method") and may_raise(node):
            behind[node] |= 1 << len(raising)
            raising.append(node)
    every = (1 << len(raising)) - 1
    last = raising[-1] if raising else None

    def safe(w: fx.Node) -> bool:  # the update of w cannot precede a raise
        if w in raising:
            return False
        if rule == "order":
            return last is None or _after(w, last)
        return _ahead(w, behind) == every

    def put_back(i: int) -> bool:
        ws = writers.get(keys.get(i), [])
        if not ws:
            return True  # (an update the graph's nodes do not say: keep it)
        return not (safe(ws[-1]) if rule == "final" else all(map(safe, ws)))

    return tuple(i for i in mutated if put_back(i))


def _after(node: fx.Node, other: fx.Node) -> bool:
    """``node`` comes after ``other`` in their graph's order."""
    return bool(other < node)


def _ahead(node: fx.Node, behind: dict[fx.Node, int]) -> int:
    """The raising nodes ``node``'s inputs depend on (``node`` itself left out)."""
    mask = 0
    for up in node.all_input_nodes:
        mask |= behind[up]
    return mask


def may_raise(node: fx.Node) -> bool:
    """Whether the operation of ``node`` may raise on a hit (see the module's docstring)."""
    target = node.target
    if target is operator.getitem:
        return any(isinstance(a, fx.Node) and _is_tensor(a) for a in _flat(node.args[1:]))
    if target in _SAFE_OPERATORS:
        return False
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if not isinstance(target, str) and not _from_torch(target):
        return True
    base = name[:-1] if name.endswith("_") and not name.endswith("__") else name
    if base in _ROUNDING_DIVISIONS and node.kwargs.get("rounding_mode") is not None:
        # (integer floor/trunc division by zero raises)
        return not _floating_result(node, inplace=base != name)
    return base not in _CANNOT_RAISE and name not in _CANNOT_RAISE


# listed divisions that take a ``rounding_mode``: with one, integer division by zero raises
_ROUNDING_DIVISIONS = frozenset({"div", "divide"})


def _floating_result(node: fx.Node, *, inplace: bool) -> bool:
    """``node`` gives a floating-point or complex tensor, as far as the recording knows (an
    in-place update, ``x.div_(y, ...)``, its first operand's dtype); unknown is not."""
    dtype = _dtype(node)
    if dtype is None and inplace and node.args:
        first = node.args[0]
        dtype = _dtype(first) if isinstance(first, fx.Node) else None
    return dtype is not None and (dtype.is_floating_point or dtype.is_complex)


def _dtype(node: fx.Node) -> torch.dtype | None:
    if "dtype" in node.meta:
        return node.meta["dtype"]
    value = node.meta.get("example_value", node.meta.get("val"))
    return value.dtype if isinstance(value, torch.Tensor) else None


def _from_torch(target: Any) -> bool:
    module = getattr(target, "__module__", None) or ""
    return module.split(".")[0] in ("torch", "magpy_monitor") or isinstance(
        target, torch._ops.OpOverload | torch._ops.OpOverloadPacket
    )


def _is_tensor(node: fx.Node) -> bool:
    value = node.meta.get("example_value", node.meta.get("val"))
    return value is None or isinstance(value, torch.Tensor)  # (unknown: take it for a tensor)


def _flat(args: Any) -> Iterable[Any]:
    for a in args:
        if isinstance(a, tuple | list):
            yield from _flat(a)
        elif isinstance(a, slice):
            yield from (a.start, a.stop, a.step)
        else:
            yield a


def mutated_inputs(cap: Capture) -> tuple[int, ...]:
    """``Capture.mutated_inputs``: the graph inputs whose memory the graph updates."""
    ids = {id(v.obj) for v in cap.mutated_tensors}
    return tuple(
        i
        for i, t in enumerate(cap.rec.example_inputs)
        if id(t) in ids or (isinstance(t, torch.Tensor) and storage_key(t) in cap.updated)
    )


def restore_set(cap: Capture, rule: str) -> tuple[int, ...]:
    """``Capture.undo_inputs``: all of ``mutated_inputs`` when the record assumes values (its
    checks run after the graph, so a miss puts back everything) or an update's storage is
    unknown, else ``undo_inputs`` under ``rule``."""
    mutated = mutated_inputs(cap)
    if cap.assumptions or cap.assumed_shapes or cap.updated_unknown or not mutated:
        return mutated
    keys = {
        i: storage_key(t)
        for i, t in enumerate(cap.rec.example_inputs)
        if isinstance(t, torch.Tensor) and storage_key(t) is not None
    }
    return undo_inputs(cap.rec.graph, mutated, keys, rule)
