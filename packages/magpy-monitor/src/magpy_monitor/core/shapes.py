"""Dynamic tensor dimensions while monitoring: symbolic sizes and the guards they need.

A dimension of an entry tensor is *dynamic* when the runtime names it in the capture's
``dynamic_paths`` (``dim_key(path, d)``, after a cache miss saw that size change) or when every
dimension is (``promote_all``: ``dynamic=True``). Only dimensions of size >= 2 of contiguous (or
channels-last) tensors that are not parameters become dynamic; sizes 0 and 1 stay specialised,
as in ``torch.compile``. For a capture with dynamic dimensions:

- the tensor's TENSOR_META guard leaves the dynamic sizes out (``tensor_meta(t, dims)``): it
  checks class, dtype, device, ndim, the static sizes, ``size >= 2`` for the dynamic ones and
  the memory layout;
- its placeholder carries a fake tensor whose dynamic sizes are symbols of one ``ShapeEnv``
  (node meta ``"magpy_fake"``). Fake values of recorded nodes are computed lazily, only for
  tensors whose shape the program reads;
- reading a size that is symbolic (``x.shape[0]``, ``x.size(1)``, ``len(x)``, ``x.numel()``,
  also of tensors computed from dynamic ones) gives a *symbolic int* ``Val``: the real value,
  the graph node computing it (``x.size(0)``) and the ``SymInt``. Passed to a tensor operation
  (``x.view(b, -1)``, ``torch.arange(n)``) the node goes into the graph, so the graph follows
  the size. Observed by Python (a branch, ``range``, a dict key, a pure call) it is
  *specialised*: the entry sizes it depends on get a TENSOR_META guard naming their values;
- relations the ``ShapeEnv`` relied on (``Eq(s0, s1)`` when ``x + y`` broadcasts two dynamic
  sizes) are turned into a shape guard by ``magpy_codegen``, which reads the placeholders' fakes.

If a fake value cannot be computed (an operation fake tensors do not support), every dynamic
size of the capture is specialised: the record is then exactly as static as without dynamic
shapes, never wrong. This is the only module of the monitor that uses torch's fake-tensor and
symbolic-shape machinery.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
import warnings
from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx
from torch._guards import GuardSource, Source
from torch._subclasses.fake_tensor import FakeTensorMode

from magpy_refgraph import Attr, GuardKind, Item, Path, Unsupported

from . import registry
from .values import ScalarFx, Val
from .valuetypes import tensor_flags

if TYPE_CHECKING:
    from .capture import Capture

__all__ = [
    "FAKE",
    "SIZE_FREE_READS",
    "SYM_OPS",
    "ShapeTracker",
    "SymInt",
    "concatenated",
    "dim_key",
    "dynamic_dims",
    "index_by_promoted_int",
    "is_symbolic",
    "marked_dims",
    "observe_meta",
    "read_offsets",
    "relation_guarded",
    "symbolic_shapes",
    "tensor_meta",
]

FAKE = "magpy_fake"  # node meta: the fake value (FakeTensor, SymInt...) or None when unknown
_MISSING = object()

# Tensor metadata reads that do not depend on sizes (the relaxed TENSOR_META guard covers them).
SIZE_FREE_READS = frozenset(
    "dtype device ndim dim ndimension is_cuda is_cpu requires_grad layout is_sparse "
    "is_quantized is_leaf is_meta is_mkldnn is_nested names is_mps is_xpu itemsize "
    "element_size is_floating_point is_complex get_device is_signed is_inference "
    "has_names".split()
)
# Integer operations a symbolic size may go through and stay symbolic (recorded in the graph).
SYM_OPS = frozenset(
    {
        operator.add,
        operator.sub,
        operator.mul,
        operator.floordiv,
        operator.mod,
        operator.neg,
        operator.iadd,
        operator.isub,
        operator.imul,
        operator.ifloordiv,
    }
)


def dim_key(path: Path, dim: int) -> Path:
    """The key naming dimension ``dim`` of the entry tensor at ``path`` in ``dynamic_paths``."""
    return path.child(Attr("shape")).child(Item(dim))


def _layout(t: torch.Tensor) -> str | None:
    if t.is_contiguous():
        return "contiguous"
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        return "channels_last"
    return None


def tensor_meta(
    t: torch.Tensor, dynamic: Collection[int] = (), *, offset: bool = False
) -> tuple[Any, ...]:
    """The TENSOR_META payload of ``t``: ``(class, dtype, device, shape, stride, requires_grad,
    flags)`` (``flags``: :func:`~.valuetypes.tensor_flags`, with the storage offset where
    ``offset``).

    With ``dynamic`` dims the shape has ``None`` there and the stride is the layout's name
    (``"contiguous"``/``"channels_last"``) instead of numbers.
    """
    if not dynamic:
        meta = (type(t), t.dtype, t.device, tuple(t.shape), tuple(t.stride()), t.requires_grad)
        return (*meta, tensor_flags(t, offset=offset))
    shape = tuple(None if d in dynamic else n for d, n in enumerate(t.shape))
    flags = tensor_flags(t, offset=offset)
    return (type(t), t.dtype, t.device, shape, _layout(t), t.requires_grad, flags)


def observe_meta(cap: Capture, val: Val, dims: Collection[int]) -> None:
    """Guard entry tensor ``val``'s metadata, its ``dims`` left dynamic (and its storage
    offset once the program read one)."""
    assert val.node is not None
    if torch.nn.parameter.is_lazy(val.obj):  # (its shape raises until it is materialized)
        raise Unsupported(f"an uninitialized lazy {type(val.obj).__name__}")
    cap.metas[val.node] = (val.obj, dims)
    meta = tensor_meta(val.obj, dims, offset=cap.offsets_read)
    cap.graph.observe(val.node, GuardKind.TENSOR_META, meta)
    if type(val.obj) not in _PLAIN_TENSORS:
        registry.GUARD_LAYOUT.impl(cap, val)


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def read_offsets(cap: Capture) -> None:
    """The program read a storage offset: every entry tensor's offset is guarded (an
    intermediate's offset follows from its inputs'). Until then none is: no operator's result
    depends on where its input starts in its storage."""
    if not cap.offsets_read:
        cap.offsets_read = True
        for node, (t, dims) in cap.metas.items():
            cap.graph.observe(node, GuardKind.TENSOR_META, tensor_meta(t, dims, offset=True))


# the attributes torch's dimension markers set on a tensor: ``torch._dynamo.mark_dynamic``,
# ``maybe_mark_dynamic``, ``mark_unbacked`` (also ``strict=True``) make a dim dynamic in the
# first capture; ``mark_static`` keeps one static under ``dynamic=True`` and after a miss saw it
# change. A dim marked both ways is dynamic (mark_dynamic wins, as in TorchDynamo)
_MARKED = "_has_dynamo_dim_marking"
_MARKED_DYNAMIC = (
    "_dynamo_dynamic_indices",
    "_dynamo_weak_dynamic_indices",
    "_dynamo_unbacked_indices",
    "_dynamo_strict_unbacked_indices",
)
_MARKED_STATIC = "_dynamo_static_indices"


def marked_dims(t: torch.Tensor) -> tuple[frozenset[int], frozenset[int]]:
    """The dims of ``t`` torch's markers make dynamic, and those they keep static."""
    if not getattr(t, _MARKED, False):
        return frozenset(), frozenset()
    # (a dim is marked by its index from 0: a negative one marks nothing, as in TorchDynamo)
    dynamic = frozenset(d for a in _MARKED_DYNAMIC for d in getattr(t, a, ()))
    return dynamic, frozenset(getattr(t, _MARKED_STATIC, ())) - dynamic


def dynamic_dims(
    t: torch.Tensor, path: Path, dynamic_paths: Collection[Path], promote_all: bool
) -> tuple[int, ...]:
    """The dims of entry tensor ``t`` (read from ``path``) to capture with symbolic sizes:
    those torch's markers make dynamic, and, unless marked static, every dim (``promote_all``)
    or those ``dynamic_paths`` names. Sizes 0 and 1 stay specialised, marked or not."""
    if isinstance(t, torch.nn.Parameter) or t.is_sparse or t.layout is not torch.strided:
        return ()
    marked, static = marked_dims(t)
    if not (promote_all or dynamic_paths or marked):
        return ()
    if _layout(t) is None or type(t) is not torch.Tensor:
        return ()
    return tuple(
        d
        for d, n in enumerate(t.shape)
        if n >= 2
        and (
            d in marked or (d not in static and (promote_all or dim_key(path, d) in dynamic_paths))
        )
    )


class SymInt(ScalarFx):
    """A symbolic int (a size that follows a dynamic dim, or int arithmetic over such): ``sym``
    is its value in the ShapeEnv, ``fx`` the graph node computing it."""

    __slots__ = ("sym",)

    def __init__(self, fx: fx.Node, sym: Any) -> None:
        super().__init__(fx)
        self.sym = sym


def is_symbolic(val: Val) -> bool:
    """True for a symbolic int, or an int expression over symbolic ints, not yet specialised."""
    if val.const or type(val.obj) is not int:
        return False
    if val.payload(SymInt) is not None:
        return True
    return val.expr is not None and any(is_symbolic(a) for a in val.expr[1])


@dataclasses.dataclass(frozen=True)
class _DimSource(Source):
    """A ``torch._guards.Source`` naming one entry dimension (used in the ShapeEnv's messages)."""

    label: str

    @property
    def guard_source(self) -> GuardSource:
        return GuardSource.LOCAL

    @property
    def _name_template(self) -> str:
        return self.label


def symbolic_shapes() -> Any:
    """torch's symbolic-shape module, imported on first use: importing it costs about a second
    (sympy), and only a capture with a dynamic dimension needs it."""
    from torch.fx.experimental import symbolic_shapes

    return symbolic_shapes


class ShapeTracker:
    """The symbolic-shape state of one capture (created at its first dynamic placeholder)."""

    def __init__(self) -> None:
        self.env = symbolic_shapes().ShapeEnv()
        self.mode = FakeTensorMode(shape_env=self.env, allow_non_fake_inputs=True)
        self.symbols: dict[Any, tuple[Val, int]] = {}  # sympy symbol -> (entry tensor, dim)
        self.dynamic: dict[int, tuple[Val, set[int]]] = {}  # id(Val) -> (tensor, dims left)

    # ------------------------------------------------------------------ fake values
    def add_input(self, val: Val, node: fx.Node, dims: tuple[int, ...], label: str) -> None:
        """Give placeholder ``node`` of entry tensor ``val`` a fake with symbolic ``dims``."""
        sym = symbolic_shapes()
        kind = sym.DimDynamic
        t = val.obj
        ctx: Any = sym.StatelessSymbolicContext(
            dynamic_sizes=[kind.DYNAMIC if d in dims else kind.STATIC for d in range(t.dim())]
        )
        with _quiet():
            fake = self.mode.from_tensor(t, source=_DimSource(label), symbolic_context=ctx)
        node.meta[FAKE] = fake
        self.dynamic[id(val)] = (val, set(dims))
        for d in dims:
            size: Any = fake.shape[d]
            if isinstance(size, torch.SymInt):
                self.symbols[size.node.expr] = (val, d)

    def fake(self, node: Any) -> Any:
        """The fake value of fx ``node`` (computed with its inputs on first use), or None."""
        if not isinstance(node, fx.Node):
            return node
        memo = node.meta.get(FAKE, _MISSING)
        if memo is not _MISSING:
            return memo
        todo: list[fx.Node] = []
        seen: set[fx.Node] = set()
        stack = [node]
        while stack:
            n = stack.pop()
            if n in seen or FAKE in n.meta:
                continue
            seen.add(n)
            todo.append(n)
            stack.extend(n.all_input_nodes)
        order = {n: i for i, n in enumerate(node.graph.nodes)}
        for n in sorted(todo, key=order.__getitem__):
            n.meta[FAKE] = self._evaluate(n)
        return node.meta[FAKE]

    def _evaluate(self, node: fx.Node) -> Any:
        if node.op == "placeholder":
            example = node.meta.get("example_value")
            if not isinstance(example, torch.Tensor):
                return None
            with _quiet():
                return self.mode.from_tensor(example, static_shapes=True)
        if node.op not in ("call_function", "call_method"):
            return None
        failed = False

        def fake_of(a: fx.Node) -> Any:
            nonlocal failed
            value = a.meta.get(FAKE)
            failed = failed or value is None
            return value

        args = fx.node.map_arg(node.args, fake_of)
        kwargs = fx.node.map_arg(node.kwargs, fake_of)
        if failed:
            return None
        try:
            with _quiet(), self.mode, torch.no_grad():
                if node.op == "call_method":
                    return getattr(args[0], str(node.target))(*args[1:], **kwargs)
                return node.target(*args, **kwargs)  # type: ignore[operator]
        except Exception:  # an operation fake tensors cannot run: sizes become unknown
            return None

    # ------------------------------------------------------------------ symbolic ints
    def free(self, sym: Any) -> set[Any] | None:
        """The entry symbols ``sym`` depends on; None when some are unknown (data-dependent)."""
        if not isinstance(sym, torch.SymInt | torch.SymFloat | torch.SymBool):
            return set()
        symbols = set(self.env.replace(sym.node.expr).free_symbols)
        if any(s not in self.symbols for s in symbols):
            return None
        return symbols

    def is_static(self, sym: Any) -> bool:
        """True when ``sym`` does not depend on any dynamic size still unspecialised."""
        symbols = self.free(sym)
        if symbols is None:
            return False
        return all(
            self.symbols[s][1] not in self.dynamic[id(self.symbols[s][0])][1] for s in symbols
        )

    def specialise(self, cap: Capture, sym: Any) -> None:
        """Python depends on the value of ``sym``: guard the entry sizes it is made of."""
        symbols = self.free(sym)
        if symbols is None:
            self.specialise_all(cap)
            return
        for s in symbols:
            val, d = self.symbols[s]
            self.specialise_dims(cap, val, {d})

    def specialise_dims(self, cap: Capture, val: Val, dims: set[int]) -> None:
        """Guard the sizes ``dims`` of entry tensor ``val`` by value (all its dims: exactly)."""
        entry = self.dynamic.get(id(val))
        if entry is None or not (entry[1] & dims):
            return
        entry[1].difference_update(dims)
        if val.node is not None:
            observe_meta(cap, val, entry[1])

    def specialise_all(self, cap: Capture) -> None:
        """Guard every dynamic size of the capture by value (nothing stays symbolic)."""
        for val, dims in list(self.dynamic.values()):
            self.specialise_dims(cap, val, set(dims))

    def specialise_tensor(self, cap: Capture, val: Val) -> None:
        """Python depends on all of tensor ``val``'s sizes and strides."""
        if id(val) in self.dynamic:
            self.specialise_dims(cap, val, set(range(val.obj.dim())))
            return
        fake = self.fake(val.fx) if val.fx is not None else None
        if not isinstance(fake, torch.Tensor):
            self.specialise_all(cap)
            return
        for s in (*fake.shape, *fake.stride(), fake.storage_offset()):
            self.specialise(cap, s)

    def sym_val(self, real: int, node: fx.Node, sym: Any) -> Val:
        """A symbolic int: value ``real``, computed in the graph by ``node``."""
        node.meta[FAKE] = sym
        return Val(real, payload=SymInt(node, sym))


def _fake_tensor(cap: Capture, val: Val) -> tuple[ShapeTracker, fx.Node, Any] | None:
    """The tracker, graph node and fake value of tensor ``val``, if the capture is symbolic."""
    if cap.shapes is None:
        if not (val.external and val.node is not None and val.fx is None):
            return None
        path = cap.paths[val.node]
        if not dynamic_dims(val.obj, path, cap.dynamic_paths, cap.promote_all):
            return None
    node = cap.tensor_node(val)  # creates the tracker for a dynamic entry tensor
    tracker = cap.shapes
    if tracker is None or node.meta.get("dyn_shape"):  # data-dependent: a graph break
        return None
    fake = tracker.fake(node)
    if not isinstance(fake, torch.Tensor):
        return None
    return tracker, node, fake


def size_vals(cap: Capture, val: Val) -> list[Val] | None:
    """One ``Val`` per dim of tensor ``val`` when some size is symbolic; None otherwise."""
    found = _fake_tensor(cap, val)
    if found is None:
        return None
    tracker, node, fake = found
    real = val.obj.shape
    if all(tracker.is_static(s) for s in fake.shape):
        return None
    out: list[Val] = []
    for d, s in enumerate(fake.shape):
        if tracker.is_static(s):
            out.append(cap.const(real[d]))
        else:
            size = cap.rec.call("call_method", "size", (node, d), {})
            out.append(tracker.sym_val(real[d], size, s))
    return out


def numel_val(cap: Capture, val: Val) -> Val | None:
    """``x.numel()`` as a symbolic int, or None when it is static."""
    found = _fake_tensor(cap, val)
    if found is None:
        return None
    tracker, node, fake = found
    sym = fake.numel()
    if tracker.is_static(sym):
        return None
    numel = cap.rec.call("call_method", "numel", (node,), {})
    return tracker.sym_val(val.obj.numel(), numel, sym)


def sym_node(cap: Capture, val: Val) -> fx.Node | None:
    """The graph node computing symbolic int ``val`` (recording int arithmetic), or None."""
    tracker = cap.shapes
    if tracker is None or not is_symbolic(val):
        return None
    known = val.payload(SymInt)
    if known is not None:
        if tracker.is_static(known.sym):
            val.const = True
            return None
        node: fx.Node = known.fx
        return node
    assert val.expr is not None
    fn, args = val.expr
    if fn not in SYM_OPS:
        return None
    fx_args: list[Any] = []
    syms: list[Any] = []
    for a in args:
        n = sym_node(cap, a)
        if n is None:
            cap.observe(a)
            fx_args.append(a.obj)
            syms.append(a.obj)
        else:
            fx_args.append(n)
            syms.append(a.require(SymInt).sym)
    try:
        sym = fn(*syms)
    except Exception:
        return None
    node = cap.rec.call("call_function", fn, tuple(fx_args), {})
    val.set_payload(SymInt(node, sym))
    node.meta[FAKE] = sym
    return node


_RELATIONS = frozenset(
    {operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge}
)


def relation_guarded(cap: Capture, val: Val) -> bool:
    """``val``, a comparison involving a symbolic size that Python depends on (a branch on
    ``kv_length == q_length``, ``x.numel() == 0``): its outcome is decided by the ShapeEnv under
    the call's sizes, which records the relation as a guard if it is not implied already (the
    codegen's shape guard checks it); the sizes stay symbolic. False where it is no such
    comparison or the ShapeEnv cannot decide it (then the sizes are specialised)."""
    assert val.expr is not None
    fn, args = val.expr
    if type(val.obj) is not bool or fn not in _RELATIONS or not any(map(is_symbolic, args)):
        return False
    syms = [_sym_of(cap, a) for a in args]
    if any(s is None for s in syms):
        return False
    try:
        with _quiet():
            outcome = bool(fn(*syms))  # (ShapeEnv.evaluate_expr: adds the guard it needs)
    except Exception:
        return False
    if outcome is not val.obj:
        return False
    val.const = True
    return True


def _sym_of(cap: Capture, val: Val) -> Any:
    """The ShapeEnv value of int ``val``: its symbol expression, or (guarded) its value."""
    if not is_symbolic(val):
        if type(val.obj) is not int:
            return None
        cap.observe(val)
        return val.obj
    known = val.payload(SymInt)
    if known is not None:
        return known.sym
    assert val.expr is not None
    fn, args = val.expr
    if fn not in SYM_OPS:
        return None
    parts = [_sym_of(cap, a) for a in args]
    if any(p is None for p in parts):
        return None
    try:
        return fn(*parts)
    except Exception:
        return None


def check_arity(cap: Capture, node: fx.Node) -> None:
    """An operation returned a sequence whose length may follow a dynamic size: make it fixed."""
    tracker = cap.shapes
    if tracker is not None and tracker.fake(node) is None:
        tracker.specialise_all(cap)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence warnings torch emits while computing fake values (tests turn them into errors)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def index_by_promoted_int(cap: Any, base: Val, key: Val) -> Any:
    """``x[t]`` with ``t`` a promoted int (a 0-d tensor graph input, e.g. a loop index).

    Recorded as one ``aten.index`` with the 0-d index: the row's shape is known in advance
    (``x[t]`` with Python's ``__index__`` would read the value, which compilers cannot trace),
    a negative ``t`` counts from the end and an out-of-range one raises ``IndexError``, as
    eager's ``x[t]`` does (the graph's error is the program's: it reruns natively and raises).
    Returns None when ``key`` is not a promoted int.
    """
    if type(key.obj) is not int or key.const:
        return None
    scalar = cap.dynamic_scalar(key)
    if scalar is None or base.obj.dim() == 0:
        return None
    row = cap.rec.call(
        "call_function", torch.ops.aten.index.Tensor, (cap.to_arg(base), [scalar]), {}
    )
    row.meta["copied_view"] = True  # eager's x[t] is a view: in-place updates of it break
    return row


def concatenated(val: Any) -> bool:
    """``val`` is ``a + b`` of two tuples whose items are known (a shape being extended)."""
    if val.expr is None or val.expr[0] is not operator.add or not isinstance(val.obj, tuple):
        return False
    return all(
        isinstance(a.obj, tuple) and (isinstance(a.items, list) or a.const) for a in val.expr[1]
    )
