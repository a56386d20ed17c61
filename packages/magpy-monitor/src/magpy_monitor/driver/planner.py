"""Turn a finished capture into a ``Plan``: guard requirements, graph inputs/outputs, mock recipes.

This is the paper's Alg. 1 applied to our RefGraph: the guard set comes from the nodes reachable
from SN#0 through version-0 read edges that the program observed; the mock reproduces the return
value and every write into pre-existing objects (the last-version created edges), building new
objects once each so that aliasing is preserved.
"""

from __future__ import annotations

import collections
import enum
import functools
import operator
import types
from typing import Any

import torch

from magpy_refgraph import (
    AdvanceIter,
    AppendItem,
    Apply,
    Build,
    BuildKind,
    CallMethod,
    Check,
    Constant,
    DelAttr,
    DelItem,
    FromPath,
    GraphOut,
    GuardKind,
    IterLen,
    Plan,
    Recipe,
    ReplaceContents,
    SetAttr,
    SetItem,
    Unsupported,
    WriteBack,
    guard_requirements,
    node_aliases,
)

from ..bytecode.closures import function_recipe, is_made_function
from ..bytecode.exceptions import GradExit, reenter_grad_context
from ..bytecode.iteration import AheadIterator, IteratorState, LazyRange
from ..core.capture import Capture
from ..core.shapes import SymInt
from ..core.speculation import Speculated
from ..core.values import BoundMethod, Val, Write
from ..core.valuetypes import is_value_type
from ..cpython.frameio import NULL
from ..libs.stdlib.pyenv import check_context_vars
from ..libs.torch.tensorattrs import with_attributes
from ..pyobj.classes import MadeClass, class_escapes
from ..pyobj.contexts import ContextExit, PythonExit
from ..pyobj.instances import is_pyobj, object_recipe
from ..pyobj.objects import ctor_recipe, filled_recipe, python_tuple_new
from ..pyobj.sets import rebuild_check

__all__ = ["build_plan"]

_REBUILDABLE_ITERATORS: tuple[type, ...] = (type(iter(range(0))), type(iter([])), type(iter(())))
_MUTABLE_CONSTS = (list, dict, set, collections.deque, collections.OrderedDict)


_SHAREABLE = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.ModuleType,
    types.CodeType,
    type,
    enum.Enum,
    torch.Size,
    torch.finfo,
    torch.iinfo,
    functools.partial,
)


_ITEM = operator.methodcaller("item")


def _shareable(obj: Any) -> bool:
    """Whether the mock may hand the same object to every call (it cannot be changed)."""
    if is_value_type(obj) or isinstance(obj, _SHAREABLE):
        return not isinstance(obj, torch.nn.Module)
    if type(obj) in (tuple, frozenset):
        return all(_shareable(x) for x in obj)
    return False  # numpy scalars are value types (is_value_type); any ndarray is mutable


class _Planner:
    def __init__(self, cap: Capture, loop_iterators: frozenset[int] = frozenset()) -> None:
        self.cap = cap
        self.loop_iterators = loop_iterators
        self.outputs: list[Any] = []
        self.output_index: dict[Any, int] = {}
        self.builds: dict[int, Build] = {}
        self.mutated = {id(v) for v in cap.mutated_tensors}

    def graph_out(self, node: Any) -> GraphOut:
        if getattr(node, "meta", {}).get("copied_view"):
            # eager's object is a view of another tensor; the graph's is a copy (x[t] with a
            # promoted index): it must not reach the program
            raise Unsupported("x[i] indexed by a value that changes per call escapes the graph")
        i = self.output_index.get(node)
        if i is None:
            i = self.output_index[node] = len(self.outputs)
            self.outputs.append(node)
        return GraphOut(i)

    def recipe(self, v: Val) -> Recipe:
        obj = v.obj
        if obj is NULL:
            raise Unsupported("NULL cannot be rebuilt")
        if isinstance(obj, torch.Tensor):
            return self._tensor(v)
        if v.external and v.node is not None:
            if v.const and is_value_type(obj):
                return Constant(obj)
            return FromPath(self.cap.paths[v.node])
        if not v.const and (sym := v.payload(SymInt)) is not None:
            return self.graph_out(sym.fx)  # a size that follows a dynamic dim
        if not v.const and (read := v.payload(Speculated)) is not None:
            # a tensor's value read into Python: this call's value, from its 0-d graph output
            return Apply(Constant(_ITEM), (self.graph_out(read.fx),))
        if v.expr is not None and not v.const:
            fn, args = v.expr
            return Apply(Constant(fn), tuple(self.recipe(a) for a in args))
        replayed = filled_recipe(v, self.recipe, self.cap.known) or ctor_recipe(v, self.recipe)
        if replayed is not None:
            return replayed
        if is_pyobj(v):  # an instance of a plain class built in the run
            return object_recipe(v, self.recipe)
        if is_made_function(v):  # a nested def or lambda: a new function for every call
            return function_recipe(v, self.recipe)
        if v.payload(MadeClass) is not None:
            raise class_escapes(v)
        if v.items is not None:
            return self._build(v)
        if v.const or is_value_type(obj):
            return self._const(obj)
        if isinstance(
            obj, types.FunctionType | types.BuiltinFunctionType | type | types.ModuleType
        ):
            return Constant(obj)
        special = self._special(v)
        if special is not None:
            return special
        raise Unsupported(f"cannot rebuild a {type(obj).__name__} created during the run")

    def _special(self, v: Val) -> Recipe | None:
        """Iterators over known containers, and a context manager's ``__exit__``."""
        if (grad := v.payload(GradExit)) is not None:
            args = (Constant(grad.cls), Constant(grad.mode), Constant(grad.prev))
            return Apply(Constant(reenter_grad_context), args)
        if (block := v.payload(ContextExit)) is not None:  # a modelled context's __exit__
            again = block.model.reenter()
            if again is None:
                raise Unsupported(f"a segment ending inside a {type(v.obj.__self__).__name__}")
            fn, fn_args = again
            return Apply(Constant(fn), tuple(Constant(a) for a in fn_args))
        if (bound := v.payload(PythonExit)) is not None:  # a Python context's __exit__
            return Apply(Constant(getattr), (self.recipe(bound.self_val), Constant("__exit__")))
        if (bound_to := v.payload(BoundMethod)) is not None:
            return self._bound_method(v, bound_to.self_val)
        if (lazy := v.payload(LazyRange)) is not None:  # untouched, over a dynamic range
            return Build(id(v), BuildKind.ITER, (self.recipe(lazy.range_val),), (0,))
        it = v.payload(IteratorState)
        if it is not None and it.base is not None and type(v.obj) in _REBUILDABLE_ITERATORS:
            # (what it has left, not ``__reduce__``: a 3.12 range iterator reduces to the range
            # it has left, at position 0)
            pos = len(it.base.obj) - operator.length_hint(v.obj)
            if pos != it.pos:
                raise Unsupported("iterator position disagrees with the shadow")
            return Build(id(v), BuildKind.ITER, (self.recipe(it.base),), (pos,))
        if (
            it is not None
            and id(v) in self.loop_iterators
            and _self_contained(it)
            and type(v.obj) in _LOOP_ITERATORS
        ):
            # a loop's own iterator (``for i, layer in enumerate(self.layers)`` cut inside its
            # body): only FOR_ITER sees it, so one of its type over the values it has left does
            rest = Build(-id(v), BuildKind.TUPLE, tuple(self.recipe(x) for x in it.items[it.pos :]))
            parts = (Constant(rebuilt_iterator), Constant(type(v.obj)), rest)
            return Build(id(v), BuildKind.CALL, parts)
        return None

    def _bound_method(self, v: Val, self_val: Val) -> Recipe | None:
        """A method bound during the run, left on a segment's stack for a call after the cut
        (``self._sliding_chunks_query_key_matmul(...)``): bound again to the same object (its
        function was guarded where the run looked it up)."""
        method = v.obj
        if getattr(method, "__self__", None) is not self_val.obj:
            return None
        if type(method) is types.MethodType:
            parts = (Constant(method.__func__), self.recipe(self_val))
            return Apply(Constant(types.MethodType), parts)
        name = getattr(method, "__name__", None)
        if type(method) is types.BuiltinMethodType and isinstance(self_val.obj, torch.Tensor):
            return Apply(Constant(getattr), (self.recipe(self_val), Constant(name)))
        return None

    def _tensor(self, v: Val) -> Recipe:
        if v.external and v.node is not None:
            # an entry tensor (possibly updated in place by the graph): the very object
            return FromPath(self.cap.paths[v.node])
        if v.fx is not None:
            out = self.graph_out(v.fx)
            return self._with_attributes(v, out) if v.attrs else out
        raise Unsupported("a tensor of unknown origin reaches the output")

    def _with_attributes(self, v: Val, out: GraphOut) -> Build:
        """A graph's tensor the run gave Python attributes (``y.stop_gradient = True``)."""
        done = self.builds.get(id(v))
        if done is not None:
            return done
        assert v.attrs is not None
        values = tuple(self.recipe(x) for x in v.attrs.values())
        parts = (Constant(with_attributes), out, Constant(tuple(v.attrs)), *values)
        built = self.builds[id(v)] = Build(id(v), BuildKind.CALL, parts)
        return built

    def _const(self, obj: Any) -> Recipe:
        if type(obj) in (list, set):
            parts = tuple(self._const(x) for x in obj)
            return Build(id(obj), BuildKind.LIST if type(obj) is list else BuildKind.SET, parts)
        if type(obj) is dict:
            kv: list[Recipe] = []
            for k, x in obj.items():
                kv += [Constant(k), self._const(x)]
            return Build(id(obj), BuildKind.DICT, tuple(kv), (dict,))
        if type(obj) is tuple and not all(_shareable(x) for x in obj):
            return Build(id(obj), BuildKind.TUPLE, tuple(self._const(x) for x in obj))
        if not _shareable(obj):
            # the mock would hand the very object of the recorded run to every call: only
            # objects nobody can change may be shared (a numpy array changed in place later
            # would leak from one call into the next)
            raise Unsupported(f"cannot rebuild a constant {type(obj).__name__}")
        return Constant(obj)

    def _build(self, v: Val) -> Build:
        key = id(v)
        done = self.builds.get(key)
        if done is not None:
            return done
        obj = v.obj
        if isinstance(v.items, dict):
            kv: list[Recipe] = []
            for k, x in v.items.values():
                kv += [self.recipe(k), self.recipe(x)]
            if type(obj) is collections.defaultdict:  # defaultdict(factory, {...})
                inner = Build(-key, BuildKind.DICT, tuple(kv), (dict,))
                call = (Constant(collections.defaultdict), Constant(obj.default_factory), inner)
                b = Build(key, BuildKind.CALL, call)
            else:
                b = Build(key, BuildKind.DICT, tuple(kv), (type(obj),))
        else:
            parts = tuple(self.recipe(x) for x in v.items)
            t = type(obj)
            if t is tuple:
                b = Build(key, BuildKind.TUPLE, parts)
            elif t is list:
                b = Build(key, BuildKind.LIST, parts)
            elif t in (set, frozenset):
                rebuild_check(v)  # (only a set built by adding one element after another)
                if t is set:
                    b = Build(key, BuildKind.SET, parts)
                else:
                    inner = Build(-key, BuildKind.TUPLE, parts)
                    b = Build(key, BuildKind.CALL, (Constant(frozenset), inner))
            elif t is collections.deque:
                inner = Build(-key, BuildKind.LIST, parts)
                b = Build(key, BuildKind.CALL, (Constant(t), inner, Constant(obj.maxlen)))
            elif t is slice:
                b = Build(key, BuildKind.SLICE, parts)
            elif issubclass(t, tuple) and python_tuple_new(t) is not None:
                # (PackedSequence: its Python __new__ is not run again, tuple.__new__ is)
                tup = Build(-key, BuildKind.TUPLE, parts)
                b = Build(key, BuildKind.CALL, (Constant(tuple.__new__), Constant(t), tup))
            elif issubclass(t, tuple) and hasattr(t, "_fields"):
                b = Build(key, BuildKind.NAMEDTUPLE, parts, (t,))
            elif issubclass(t, tuple):  # structseq such as torch.return_types.max
                b = Build(key, BuildKind.CALL, (Constant(t), Build(-key, BuildKind.TUPLE, parts)))
            else:
                raise Unsupported(f"cannot rebuild a {t.__name__} created during the run")
        self.builds[key] = b
        return b

    def replace_contents(self, v: Val) -> WriteBack:
        target = FromPath(self.cap.paths[v.node])
        if isinstance(v.items, dict):
            kv: list[Recipe] = []
            for k, x in v.items.values():
                kv += [self.recipe(k), self.recipe(x)]
            return ReplaceContents(target, BuildKind.DICT, tuple(kv))
        return ReplaceContents(target, BuildKind.LIST, tuple(self.recipe(x) for x in v.items))

    def writeback(self, op: str, target: Val, key: Any, value: Val | None) -> WriteBack:
        if op == "setglobal":  # target: the module's globals dict itself
            assert value is not None
            return SetItem(Constant(target.obj), Constant(key), self.recipe(value))
        if op == "setcell":  # target: the very cell of a function from outside the run
            assert value is not None
            return SetAttr(Constant(target.obj), key, self.recipe(value))
        if op == "delglobal":
            return DelItem(Constant(target.obj), Constant(key))
        tgt = FromPath(self.cap.paths[target.node])
        if op == "setattr":
            assert value is not None
            return SetAttr(tgt, key, self.recipe(value))
        if op == "delattr":
            return DelAttr(tgt, key)
        if op == "setitem":
            assert value is not None
            return SetItem(tgt, self._const(key), self.recipe(value))
        if op == "append":
            assert value is not None
            return AppendItem(tgt, self.recipe(value))
        if op == "insert":  # on a list whose contents the run never read (``core.growing``)
            assert value is not None
            return CallMethod(tgt, "insert", (self.recipe(key), self.recipe(value)))
        if op == "callmethod":  # a change to an entry set, replayed as the same call
            return CallMethod(tgt, key, () if value is None else (self.recipe(value),))
        raise Unsupported(f"write-back {op} is not supported yet")


def _advance(cap: Capture, it: Val) -> WriteBack | None:
    """Guard how many values a pre-existing iterator has left; advance it as the run did."""
    state = it.require(AheadIterator)
    cap.graph.observe(it.node, GuardKind.CUSTOM, IterLen(state.exhausted, state.pos, state.below))
    if not state.pos:
        return None
    return AdvanceIter(FromPath(cap.paths[it.node]), state.pos)


def _identity_aliases(cap: Capture) -> list[tuple[Any, Any]]:
    """The alias pairs whose identity matters: not those of values (ints, strs, tuples of
    them), whose identity is an accident (``f.__code__.co_varnames`` is a new tuple on every
    read, equal but not the same object). Both paths of a pair reach one node: its value
    decides (one pass over the pairs, not a path search per value node)."""
    pairs = []
    for node, primary, other in node_aliases(cap.graph):
        val = node.meta.get("val") if node in cap.paths else None
        if not (isinstance(val, Val) and is_value_type(val.obj)):
            pairs.append((primary, other))
    return pairs


def _distinct(cap: Capture, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Entry paths that must reach pairwise distinct objects: the tensor inputs, and the
    objects hashed by identity that met in sets (membership answers depend on it)."""
    paths = [x for i, x in enumerate(inputs) if i not in cap.scalar_inputs]
    for node in cap.distinct_nodes:
        path = cap.paths[node]
        if path not in paths:
            paths.append(path)
    return tuple(paths)


_LOOP_ITERATORS = frozenset(
    {
        enumerate,
        zip,
        type(iter([])),
        type(iter(())),
        type(iter({}.keys())),
        type(iter({}.values())),
        type(iter({}.items())),
    }
)


def rebuilt_iterator(kind: type, rest: tuple[Any, ...]) -> Any:
    """A new iterator of type ``kind`` that gives the values ``rest`` (``enumerate``: its
    ``(i, x)`` pairs, counting on from the first ``i``; ``zip``: its tuples)."""
    if kind is enumerate:
        return enumerate(iter(tuple(x for _, x in rest)), rest[0][0] if rest else 0)
    if kind is zip:
        return zip(*(iter(column) for column in zip(*rest, strict=True)), strict=False)
    if kind is type(iter({}.items())):
        return iter(dict(rest).items())
    if kind is type(iter({}.keys())):
        return iter(dict.fromkeys(rest))
    if kind is type(iter({}.values())):
        return iter(dict(enumerate(rest)).values())
    return iter(list(rest) if kind is type(iter([])) else rest)


def _self_contained(it: IteratorState) -> bool:
    """The iterator's values are all known and it shares no iterator with another."""
    return not (it.stale or it.feeds or it.drawn_by)


def _live(writes: list[Write]) -> list[Write]:
    """The writes whose effect outlives the call: an attribute set (or deleted) and then set
    again is left to the last set (``p.grad = g`` of a backward, then ``p.grad = None`` of
    ``zero_grad``: the gradient need not even leave the graph). (A delete stays: it raises where
    the attribute is missing, which only the writes before it tell.)"""
    last: dict[tuple[int, Any], int] = {}
    for i, w in enumerate(writes):
        if w.op == "setattr" and w.target.node is not None:
            last[id(w.target.node), w.key] = i
    return [
        w
        for i, w in enumerate(writes)
        if w.op not in _ATTRIBUTE_WRITES
        or w.target.node is None
        or last.get((id(w.target.node), w.key), i) <= i
    ]


_ATTRIBUTE_WRITES = ("setattr", "delattr")


def _changed(v: Val) -> bool:
    """Whether container ``v`` from outside, which the run changed, ends with other contents
    than it had: ``state["momentum_buffer"] = buf`` of the very ``buf`` the entry held (an
    optimizer's step) leaves it as it was, and the mock need not write it back."""
    entry = v.node.meta.get("entry_items") if v.node is not None else None
    now = v.items
    if entry is None or type(entry) is not type(now):
        return True
    if isinstance(now, list):
        return len(now) != len(entry) or any(a is not b for a, b in zip(now, entry, strict=False))
    assert isinstance(now, dict)
    return list(now) != list(entry) or any(now[k][1] is not entry[k][1] for k in now)


def build_plan(
    cap: Capture, loop_iterators: frozenset[int] = frozenset()
) -> tuple[Plan, list[Any]]:
    """The plan of a finished capture and the fx output nodes it needs (in output order).

    ``loop_iterators``: ids of shadows on a segment's stack that no local holds (a loop's
    iterator: only FOR_ITER ever sees it)."""
    if cap.result is None:
        raise Unsupported("the monitored call did not return")
    check_context_vars(cap)
    p = _Planner(cap, loop_iterators)
    result = p.recipe(cap.result)
    live = _live(cap.writes)
    # draws from random generators: made again by the mock (``libs.stdlib.draws``)
    draws = tuple(w.key for w in live if w.op == "draw")
    writes = tuple(p.writeback(w.op, w.target, w.key, w.value) for w in live if w.op != "draw")
    writes += tuple(p.replace_contents(v) for v in cap.mutated_containers if _changed(v))
    writes += tuple(w for v in cap.ahead_iters if (w := _advance(cap, v)) is not None)
    checks = tuple(
        Check(p.graph_out(a.node).index, a.expected, a.truth, a.where) for a in cap.assumptions
    )
    inputs = tuple(cap.rec.input_paths)
    plan = Plan(
        guards=guard_requirements(cap.graph),
        aliases=tuple(_identity_aliases(cap)),
        distinct=_distinct(cap, inputs),
        inputs=inputs,
        result=result,
        writebacks=writes,
        num_outputs=len(p.outputs),
        scalar_inputs=frozenset(cap.scalar_inputs),
        array_inputs=frozenset(cap.array_inputs),
        checks=checks,
        draws=draws,
    )
    return plan, p.outputs
