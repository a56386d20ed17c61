"""The state of one monitored run: RefGraph, operator graph, identity table, observations.

``Capture`` owns everything that outlives a single frame: the ``RefGraph`` (SN#0, external
nodes, versioned edges), the ``GraphRecorder`` (fx graph), the table from object identity to the
``Val`` of each heap object seen, and the ordered list of writes into pre-existing objects.
Frame monitors (``core.frame``) call its value operations; the planner (``driver.planner``) turns
the final state into a ``Plan``. Which objects are values is decided in ``core.valuetypes``;
Python scalars promoted to graph inputs, in ``core.scalars``.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Collection
from typing import Any, cast

import torch
import torch.fx as fx

from magpy_refgraph import (
    Access,
    AccessKind,
    Attr,
    Global,
    GuardKind,
    Item,
    Path,
    RefGraph,
    ShadowNode,
    Unsupported,
)

from . import registry, scalars, shapes, undo, valuetypes
from .ambient import ambient_state
from .annotations import hands_back_unchanged
from .identity import IdentityTable
from .joined import refuse_joined_update, storage_key
from .recorder import GraphRecorder
from .shapes import (
    ShapeTracker,
    SymInt,
    check_arity,
    concatenated,
    dynamic_dims,
    observe_meta,
    sym_node,
)
from .speculation import (
    Assumption,
    Speculated,
    assume_outcome,
    assume_shape,
    draws_random,
    pin,
    speculated,
)
from .values import (
    AppendLog,
    Val,
    Write,
    dict_view_items,
    keys_in_order,
    plain_container,
    remember_dict_keys,
)
from .valuetypes import fx_constant_ok, hooked_tensor_type, is_value_type, node_kind, plain_scalar

__all__ = ["Capture", "Write"]


class Capture:
    """All state of one monitored run (one thread, one record)."""

    def __init__(self, name: str = "", *, verify: bool = False) -> None:
        self.name = name
        self.graph = RefGraph(verify=verify)  # verify: check it after every mutation
        self.rec = GraphRecorder()
        self.heap = IdentityTable()
        self.hooked = False  # a hooked tensor subclass was seen (``driver/tracer.py``)
        self.writes: list[Write] = []
        self.written: set[tuple[ShadowNode, Access]] = set()
        self.mutated_tensors: list[Val] = []
        self.mutated_containers: list[Val] = []
        self.retained: list[Val] = []  # tensors of the graph the run called retain_grad() on
        # entry objects hashed by identity that met in sets: the record needs them distinct
        self.distinct_nodes: dict[ShadowNode, None] = {}
        self.paths: dict[ShadowNode, Path] = {}
        self.value_guards: set[int] = set()
        self.global_checks: list[tuple[str, Any]] = []
        self.frames: list[Any] = []
        self.gen_frames: dict[int, Val] = {}
        self.result: Val | None = None
        self.code_info: Any = None
        # set by a segment monitor: asked when an inlined callee reaches its entry site; True
        # ends the segment at the call into that callee (which then runs through its site)
        self.end_at_callee_site: Callable[[], bool] | None = None
        self.grad_enabled = torch.is_grad_enabled()  # guarded: the mode when capture started
        self.ambient = ambient_state()  # guarded too: it changes what the graph's ops compute
        self.dynamic_paths: frozenset[Path] = frozenset()
        self.promote_all = False
        self.scalar_inputs: set[int] = set()
        self.array_inputs: set[int] = set()  # numpy arrays from outside, converted per call
        self.shapes: ShapeTracker | None = None  # symbolic sizes, once a dim is dynamic
        self.mutations = 0
        self.ahead_iters: list[Val] = []  # pre-existing iterators a loop took values from
        self.range_trip = False  # the run iterated over a range()
        # set by a segment monitor: asked at a FOR_ITER of its frame; True ends the segment
        # there (each iteration of the loop becomes a segment of its own)
        self.loop_head: Callable[[Any, Any], bool] | None = None
        self.location: tuple[str, int] | None = None
        # values of tensors read into Python that the record assumes (see _speculation)
        self.assumptions: list[Assumption] = []
        self.assumed_consts: list[Val] = []  # made constants by assumptions (undone by cut)
        self.updated: set[Any] = set()  # storages the graph writes into (see mutated_inputs)
        self.updated_unknown = False
        # tensors of data-dependent shape whose shape is assumed: graph node -> assumption
        self.assumed_shapes: dict[Any, Assumption] = {}
        self.speculate = True  # False: a value read is a graph break (it kept changing)
        # entry tensors whose metadata is guarded (node -> tensor, dynamic dims), and whether
        # their storage offsets are too (once the program reads one: ``shapes.read_offsets``)
        self.metas: dict[ShadowNode, tuple[torch.Tensor, Collection[int]]] = {}
        self.offsets_read = False

    def mark(self) -> tuple[int, ...]:
        """A cheap marker of how far the capture got (to cut a segment at an earlier point):
        graph nodes, writes, mutated tensors, in-place ops, assumptions, values made
        constants by an assumption."""
        return (
            len(self.rec.created),
            len(self.writes),
            len(self.mutated_tensors),
            self.mutations,
            len(self.assumptions),
            len(self.assumed_consts),
        )

    def cut(self, mark: tuple[int, ...]) -> None:
        """Drop the graph nodes and assumptions made after ``mark`` (no effects were): the
        values those assumptions fixed are computed again (nothing checks them now)."""
        self.rec.truncate(mark[0])
        del self.assumptions[mark[4] :]
        for val in self.assumed_consts[mark[5] :]:
            val.const = False
        del self.assumed_consts[mark[5] :]

    @property
    def mutated_inputs(self) -> tuple[int, ...]:
        """Indices of the graph inputs (``rec.example_inputs``) whose memory the graph updates
        in place (directly, or through a view: ``x[0].add_(1)``)."""
        return undo.mutated_inputs(self)

    def undo_inputs(self, rule: str) -> tuple[int, ...]:
        """Those of ``mutated_inputs`` a failed run of the graph must put back (``core.undo``)."""
        return undo.restore_set(self, rule)

    def _note_storage_update(self, t: Any, node: Any) -> None:
        """``node``, an operation of the graph, writes into ``t``'s memory."""
        key = storage_key(t) if isinstance(t, torch.Tensor) else None
        if key is None:
            if self.assumptions:
                raise Unsupported("in-place update of a tensor without storage after a value read")
            self.updated_unknown = True  # (no storage to compare: no assumption may follow)
        else:
            self.updated.add(key)
            node.meta.setdefault("updates", set()).add(key)

    @property
    def draws_random(self) -> bool:
        """The graph draws random numbers from the default generators (see _speculation)."""
        return draws_random(self)

    def assumed_const(self, val: Val) -> None:
        """``val`` is a constant of the record because an assumption checks it (directly, or
        the values it is computed from)."""
        if not val.const:
            val.const = True
            self.assumed_consts.append(val)

    # ------------------------------------------------------------------ value creation
    def const(self, obj: Any) -> Val:
        """A literal of the program."""
        return Val(obj, const=True)

    def new(self, obj: Any, **kw: Any) -> Val:
        """A value created during the run (registered by identity if it is a heap object)."""
        v = Val(obj, **kw)
        if not is_value_type(obj):
            self.heap.add(obj, v, made=True)
            self._note_hooked(obj)
        return v

    def _note_hooked(self, obj: Any) -> None:
        if type(obj) is not torch.Tensor and isinstance(obj, torch.Tensor):
            self.hooked = self.hooked or hooked_tensor_type(type(obj))

    def known(self, obj: Any, *, fresh: bool = False) -> Val | None:
        """The ``Val`` of a heap object already seen, if any (``IdentityTable.get``)."""
        if is_value_type(obj):
            return None
        return self.heap.get(obj, fresh=fresh)

    def root(self, access: Access, obj: Any) -> Val:
        """A value read from SN#0 (argument, global, builtin, closure cell)."""
        existing = self.graph.lookup(self.graph.root, access)
        if existing is not None:
            val = cast(Val, existing.meta["val"])
            return val
        return self._external(self.graph.root, access, obj, Path(access))

    def child(self, base: Val, access: Access, obj: Any) -> Val:
        """A value read through ``access`` from ``base`` (attribute, item).

        Reading from an external, unmodified object gives an external value with an entry path;
        reading what the run itself stored gives back the stored ``Val``."""
        items = None if access.kind is AccessKind.JOINED else base.items  # (flushes appends)
        if (
            isinstance(items, list)
            and type(base.obj) is list
            and access.kind is AccessKind.ITEM
            and type(access.key) is int
            and -len(items) <= access.key < len(items)
        ):
            return cast("Val", items[access.key])
        if base.node is not None and base.external:
            existing = self.graph.lookup(base.node, access)
            if existing is not None:
                val = cast("Val | None", existing.meta.get("val"))
                if val is not None and (val.obj is obj or is_value_type(obj)):
                    return val
                if val is not None and (base.node, access) not in self.written:
                    # unchanged, yet another object: computed on every read (a property)
                    where = self.paths[base.node].child(access)
                    raise Unsupported(f"{where} gives a new object on every read (a property?)")
            if (base.node, access) not in self.written:
                base_path = self.paths[base.node]
                return self._external(base.node, access, obj, base_path.child(access))
        known = self.known(obj)
        if known is not None:
            return known
        raise Unsupported(f"cannot tell where {type(obj).__name__} read via {access} comes from")

    def _external(self, src: ShadowNode, access: Access, obj: Any, path: Path) -> Val:
        known = self.known(obj)
        if known is not None and known.node is not None and known.external:
            self.graph.read(src, access, known.node)
            return known
        if known is not None and not known.const:
            # a new object reachable from entry state cannot exist; a mutated external one can
            raise Unsupported(f"{path} refers to an object created during the run")
        node = self.graph.new_node(node_kind(obj), external=True, label=str(path))
        self.graph.read(src, access, node)
        self._note_hooked(obj)
        self.paths[node] = path
        val = Val(obj, external=True, node=node)
        node.meta["val"] = val
        if isinstance(obj, dict):  # (the keys at entry: the run may change them, see KEYS)
            before = src.meta.get("dict_keys") if access.key == "__dict__" else None
            node.meta["keys"] = before if before is not None else keys_in_order(obj)
        if not is_value_type(obj):
            self.heap.add(obj, val, made=False)
        return val

    def node_of(self, val: Val) -> ShadowNode:
        """The RefGraph node of ``val`` (created on demand for values made during the run)."""
        if val.node is None:
            val.node = self.graph.new_node(
                node_kind(val.obj), external=False, label=type(val.obj).__name__
            )
            val.node.meta["val"] = val
        return val.node

    # ------------------------------------------------------------------ observations
    def observe(self, val: Val) -> None:
        """The program's behaviour depends on the *value* of ``val``: guard what it came from."""
        if val.const:
            return
        if type(val._items) is AppendLog:
            val.items  # noqa: B018  (flush: the run reads the list after appending to it)
        if val.payload(Speculated) is not None:
            pin(self, val)  # a tensor's value read into Python, used as a Python value
            return
        if type(val.obj) is bool and speculated(val) and assume_outcome(self, val):
            return  # ``s > 0`` of a value read: its outcome is its value
        if val.fx is not None:
            raise Unsupported("reads the value of a tensor computed in the graph")
        if (sym := val.payload(SymInt)) is not None and self.shapes is not None:
            self.shapes.specialise(self, sym.sym)  # a size Python depends on
            val.const = True
            return
        if val.expr is not None and self.shapes is not None and shapes.relation_guarded(self, val):
            return  # a comparison of sizes: the relation is guarded (ShapeEnv), not the sizes
        if val.expr is not None:
            fn, args = val.expr
            if fn is len:
                self.observe_len(args[0])
            else:
                for a in args:
                    self.observe(a)
            self.assumed_const(val)  # (fixed by guards or by checks: a cut may undo a check)
            return
        if val.external and val.node is not None:
            self._observe_external(val)
            return
        if type(val.obj) in (set, frozenset) and isinstance(val.items, list):
            registry.OBSERVE_SET.impl(self, val)  # its elements were guarded as they entered it
            return
        if isinstance(val.items, list):
            for item in val.items:
                self.observe(item)
        elif isinstance(val.items, dict):
            for k, item in val.items.values():
                self.observe(k)
                self.observe(item)

    def _observe_external(self, val: Val) -> None:
        obj, node = val.obj, val.node
        assert node is not None
        if isinstance(obj, torch.Tensor):
            self.tensor_node(val)
        elif isinstance(obj, set | frozenset):
            registry.OBSERVE_SET.impl(self, val)  # its contents and iteration order
        elif is_value_type(obj):
            self.graph.observe(node, GuardKind.VALUE, obj)
            val.const = True
        elif type(obj) is types.MethodType:
            # a bound method is a fresh object on every attribute read: guard what it binds
            self.observe(self.child(val, Attr("__func__"), obj.__func__))
            self.observe(self.child(val, Attr("__self__"), obj.__self__))
        elif isinstance(
            obj,
            types.FunctionType
            | types.BuiltinFunctionType
            | type
            | types.ModuleType
            | types.MethodType
            | types.CodeType,
        ):
            self.graph.observe(node, GuardKind.ID, obj)
        elif (kind := plain_container(obj)) is dict:
            self.observe_keys(val)
            for k, item in obj.items():
                self.observe(self.child(val, Item(k), item))
        elif kind is not None:  # a list, tuple (a namedtuple...) or deque: item by item
            self.observe_len(val)
            for i, item in enumerate(obj):
                self.observe(self.child(val, Item(i), item))
        else:
            self.observe_type(val)  # (its contents are not guarded: see opaque_object)

    def observe_type(self, val: Val) -> None:
        """The program depends on ``type(val)`` (attribute lookup, isinstance, dispatch)."""
        if val.external and val.node is not None:
            self.graph.observe(val.node, GuardKind.TYPE, type(val.obj))

    def observe_len(self, val: Val) -> None:
        """The program depends on ``len(val)``."""
        if isinstance(val.items, list | dict) and val.node is not None and val.external:
            return  # materialized: its length at entry is guarded, its contents followed
        if val.external and val.node is not None:
            self.observe_type(val)
            self.graph.observe(val.node, GuardKind.LEN, len(val.obj))
        elif val.expr is not None or val.items is None:
            self.observe(val)

    def observe_keys(self, val: Val) -> None:
        """The program depends on the keys (and their order) of a dict."""
        if val.external and val.node is not None:
            self.observe_type(val)
            keys = val.node.meta.get("keys", None) or keys_in_order(val.obj)
            self.graph.observe(val.node, GuardKind.KEYS, keys)

    def observe_key(self, val: Val) -> None:
        """``val`` is used as a dict key: a tensor hashes by identity (which object it is
        matters, not its value); a key hashed or compared by Python is a break (``key in d``
        has a guard that asks again: ``bytecode/operators.py``); anything else is observed."""
        if isinstance(val.obj, torch.Tensor):
            self.observe_identity(val)
        elif valuetypes.hashed_by_python(val.obj):
            raise Unsupported(f"a {type(val.obj).__name__} as a dict key (its Python hash/eq)")
        else:
            self.observe(val)

    def observe_identity(self, val: Val) -> None:
        """The program depends on *which* object ``val`` is (a function it calls, a class)."""
        if val.external and val.node is not None:
            self.graph.observe(val.node, GuardKind.ID, val.obj)

    # ------------------------------------------------------------------ tensors
    def tensor_node(self, val: Val) -> Any:
        """The fx node producing tensor ``val`` (a new placeholder for an entry tensor)."""
        if val.fx is not None:
            return val.fx
        if not (val.external and val.node is not None):
            raise Unsupported(f"tensor of unknown origin ({tuple(val.obj.shape)})")
        path = self.paths[val.node]
        dims = dynamic_dims(val.obj, path, self.dynamic_paths, self.promote_all)
        observe_meta(self, val, dims)
        val.fx = self.rec.placeholder(path, val.obj)
        val.fx.meta["dtype"] = val.obj.dtype
        if dims:
            if self.shapes is None:
                self.shapes = ShapeTracker()
            self.shapes.add_input(val, val.fx, dims, str(path))
        return val.fx

    def guard_meta(self, val: Val, *, sizes: bool = True) -> None:
        """The program depends on tensor ``val``'s metadata (shape, dtype, ...), not its data.

        ``sizes=False``: only on metadata that does not involve sizes or strides (dtype,
        device, ndim...), which leaves dynamic dims symbolic."""
        if val.fx is None and val.external and val.node is not None:
            path = self.paths[val.node]
            if not dynamic_dims(val.obj, path, self.dynamic_paths, self.promote_all):
                observe_meta(self, val, ())
                return
            self.tensor_node(val)
        elif sizes and val.fx is not None and val.fx.meta.get("dyn_shape"):
            assume_shape(self, val)  # (a graph break where nothing can be assumed)
        if sizes and self.shapes is not None and val.fx is not None:
            self.shapes.specialise_tensor(self, val)

    def to_arg(self, val: Val, *, promote: bool = False) -> Any:
        """``val`` as an fx argument: a node for tensors, a (guarded) constant otherwise.

        ``promote``: the argument is an operand of tensor arithmetic, where a Python scalar
        that changes from call to call (a *dynamic* path) becomes a graph input instead."""
        obj = val.obj
        if isinstance(obj, torch.Tensor):
            return self.tensor_node(val)
        if self.shapes is not None and not val.const:
            size = sym_node(self, val)  # a size that follows a dynamic dim
            if size is not None:
                return size
        if promote:
            node = self.dynamic_scalar(val)
            if node is not None:
                return node
        if isinstance(val.items, list) and (type(obj) in (list, tuple) or type(obj) is torch.Size):
            mapped = [self.to_arg(x) for x in val.items]
            return mapped if type(obj) is list else tuple(mapped)
        if self.shapes is not None and concatenated(val):  # x.shape[:-1] + (h, d)
            assert val.expr is not None
            return tuple(
                x
                for part in val.expr[1]
                for x in (part.obj if part.items is None else map(self.to_arg, part.items))
            )
        if type(obj) is slice and val.items is not None:
            return slice(*(self.to_arg(x) for x in val.items))
        if val.external and type(obj) in (list, tuple) and _has_tensor(obj):
            items = [self.child(val, Item(i), x) for i, x in enumerate(obj)]
            self.observe_len(val)
            mapped = [self.to_arg(x) for x in items]
            return mapped if type(obj) is list else tuple(mapped)
        if not fx_constant_ok(obj):
            held = registry.GRAPH_CONSTANT.impl(self, val)
            if held is not None:
                return held
            self.observe(val)
            raise Unsupported(f"{type(obj).__name__} object passed to a tensor operation")
        self.observe(val)
        return plain_scalar(obj)

    def dynamic_scalar(self, val: Val) -> Any:
        """The graph node of a promoted scalar (or arithmetic over promoted scalars), or None
        (``core.scalars``)."""
        return scalars.dynamic_scalar(self, val)

    def guard_outcome(self, val: Val) -> bool:
        """Python branches on ``val``, computed from one promoted scalar: guard the outcome
        instead of the scalar's value; False where nothing was guarded (``core.scalars``)."""
        return scalars.guard_outcome(self, val)

    def op_result(self, obj: Any, node: Any, *, inplace_of: Val | None = None) -> Val:
        """The ``Val`` of an operation's real result ``obj`` produced by fx ``node``."""
        if inplace_of is not None and obj is inplace_of.obj:
            self.mutate_tensor(inplace_of, node)
            return inplace_of
        if isinstance(obj, torch.Tensor):
            known = self.known(obj, fresh=True)
            if known is not None:
                # the op handed back one of its arguments: an in-place update such as
                # F.relu(x, inplace=True), or x.contiguous() returning x (then harmless)
                if (
                    isinstance(node, fx.Node)
                    and known.fx in node.all_input_nodes
                    and not hands_back_unchanged(node.target)
                ):
                    self.mutate_tensor(known, node)
                return known
            node.meta["dtype"] = obj.dtype
            return self.new(obj, fx=node)
        if isinstance(obj, tuple | list) and all(
            t is None or isinstance(t, torch.Tensor) for t in obj
        ):
            # tensors, and None where the operation's (guarded) arguments asked for no tensor
            # (``multi_head_attention_forward(..., need_weights=False)`` -> (out, None))
            check_arity(self, node)  # how many tensors came back may follow a dynamic size
            items = [
                self.const(None) if t is None else self.op_result(t, self.rec.getitem(node, i))
                for i, t in enumerate(obj)
            ]
            return self.new(obj, items=items)
        if obj is None:
            return self.const(None)
        raise Unsupported(f"tensor operation returned a {type(obj).__name__} read into Python")

    def mutate_tensor(self, val: Val, node: Any, *, result: bool = True) -> None:
        """``val``'s tensor was updated in place by ``node`` (which gives it back unless not
        ``result``: an op updating a list of tensors)."""
        if val.external:
            refuse_joined_update(self.paths.get(cast(ShadowNode, val.node)))
        if val.fx is not None and val.fx.meta.get("copied_view"):
            # x[t] with a promoted index is recorded as a copy (aten.index), not a view
            raise Unsupported("in-place update of x[i] indexed by a value that changes per call")
        node.meta["effect"] = True
        self.mutations += 1
        self._note_storage_update(val.obj, node)
        val.fx = node if result else val.fx
        if val.external and val.node is not None:
            self.graph.update_in_place(val.node, "in-place tensor op")
            self.mutated_tensors.append(val)

    # ------------------------------------------------------------------ writes
    def set_global(self, scope: dict[str, Any], name: str, value: Val) -> None:
        """``name = value`` in the module globals ``scope`` (a ``global`` statement)."""
        access = Global(name, scope=scope)
        root = self.graph.root
        self.graph.write(root, access, self.node_of(value))
        self.written.add((root, access))
        self.writes.append(Write("setglobal", Val(scope, const=True), name, value))

    def set_attr(self, base: Val, name: str, value: Val) -> None:
        """``base.name = value`` executed by the program."""
        self._store(base, Attr(name), value, "setattr")
        if base.attrs is None:
            base.attrs = {}
        base.attrs[name] = value
        view = dict_view_items(base)
        if view is not None:  # its __dict__, read before: the same state
            view[name] = (self.const(name), value)

    def del_attr(self, base: Val, name: str) -> None:
        """``del base.name`` executed by the program."""
        if base.external and base.node is not None:
            remember_dict_keys(base)
            self.graph.delete(base.node, Attr(name))
            self.written.add((base.node, Attr(name)))
            self.writes.append(Write("delattr", base, name, None))
        if base.attrs is not None:
            base.attrs.pop(name, None)
        view = dict_view_items(base)
        if view is not None:
            view.pop(name, None)

    def _store(self, base: Val, access: Access, value: Val, op: str) -> None:
        if base.external and base.node is not None:
            remember_dict_keys(base)
            self.graph.write(base.node, access, self.node_of(value))
            self.written.add((base.node, access))
            self.writes.append(Write(op, base, access.key, value))


def _has_tensor(obj: Any) -> bool:
    return any(isinstance(x, torch.Tensor) for x in obj)
