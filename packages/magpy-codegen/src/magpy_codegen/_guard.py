"""Guard generation: a fused check-and-extract function per record.

The generated ``__magpy_guard(fn, args, kwargs)`` evaluates each entry path once (in path-depth
order, so a container's type and length are checked before its elements are read), runs every
check cheapest first with short-circuit returns, and returns the operator graph's inputs as a
tuple on success or ``None`` on a miss. Any exception while checking is a miss.
"""

from __future__ import annotations

import builtins
import collections
import enum
import re
import types
from collections.abc import Callable, Iterable
from typing import Any, cast

import torch
from torch.nn.modules import module as mm

from magpy_monitor import CodeOf, hooked_tensor_type, scalar_tensor
from magpy_refgraph import (
    Access,
    AccessKind,
    CustomPayload,
    GuardKind,
    GuardReq,
    InternalError,
    IterLen,
    ModuleCall,
    ModuleNoHooks,
    NoPlainAttr,
    NotInInstanceDict,
    Outcome,
    Path,
    Plan,
    SetItems,
    SetOrder,
    exact_token,
    immutable_value,
    iter_remaining,
    literal_expr,
    plain_attr_absent,
    render_step,
    set_contents,
    set_order,
)

from ._generated import GeneratedCode, NameAllocator, comment
from ._memo import Memo, MemoPlan
from ._tensorcheck import TensorBatch

__all__ = ["PathVars", "generate_guard"]

ROOT_LOCALS = ("fn", "args", "kwargs")


class PathVars:
    """Evaluates entry paths into local variables once each (a render context for refgraph)."""

    def __init__(
        self, names: NameAllocator, lines: list[str], indent: str, roots: str = "call"
    ) -> None:
        self.roots = roots
        self.names = names
        self.lines = lines
        self.indent = indent
        self.vars: dict[Path, str] = {}
        self.remaining: dict[str, str] = {}  # iterator variable -> its ``iter_remaining``

    def root_expr(self, access: Access) -> str:
        kind, key = access.kind, access.key
        if kind is AccessKind.LOCAL:
            if self.roots == "frame":
                name = str(key)
                if name.startswith("$s"):
                    return f"S[{int(name[2:])}]"
                return f"L[{self.key_expr(name)}]"
            if key not in ROOT_LOCALS:
                raise InternalError(f"unknown root local {key!r}")
            return str(key)
        if kind is AccessKind.GLOBAL:
            if access.scope is None:
                raise InternalError(f"global {key!r} without its module dict")
            return f"{self.const_expr(access.scope)}[{self.key_expr(key)}]"
        if kind is AccessKind.BUILTIN:
            return f"{self.const_expr(builtins.__dict__)}[{self.key_expr(key)}]"
        if kind is AccessKind.CELL:
            fn = cast(types.FunctionType, access.scope)  # a CELL scope is the closure's function
            index = fn.__code__.co_freevars.index(key)
            return f"{self.const_expr(fn)}.__closure__[{index}].cell_contents"
        if kind is AccessKind.CONST:
            return self.const_expr(key)
        raise InternalError(f"not a root access: {access!r}")

    def const_expr(self, obj: object) -> str:
        return self.names.const(obj)

    def key_expr(self, key: object) -> str:
        text = literal_expr(key)
        return text if text is not None else self.const_expr(key)

    def var(self, path: Path) -> str:
        """The local variable holding ``path``'s object (emitting its evaluation if new)."""
        name = self.vars.get(path)
        if name is not None:
            return name
        if not path.steps:
            expr = self.root_expr(path.root)
            if expr in ROOT_LOCALS:
                self.vars[path] = expr
                return expr
        elif path.steps[-1].kind is AccessKind.ITER:  # (its sequence evaluated once)
            parent = self.var(Path(path.root, path.steps[:-1]))
            expr = f"{self.remaining_of(parent)}[{path.steps[-1].key!r}]"
        else:
            expr = render_step(self.var(Path(path.root, path.steps[:-1])), path.steps[-1], self)
        name = self.names.fresh("v")
        self.lines.append(f"{self.indent}{name} = {expr}")
        self.vars[path] = name
        return name

    def remaining_of(self, iterator: str) -> str:
        """The local variable holding what the iterator in ``iterator`` has left (one
        ``iter_remaining`` per guard, however many of its items and checks read it)."""
        name = self.remaining.get(iterator)
        if name is None:
            name = self.remaining[iterator] = self.names.fresh("r")
            remaining = self.const_expr(iter_remaining)
            self.lines.append(f"{self.indent}{name} = {remaining}({iterator})")
        return name


def _tensor_check(v: str, meta: tuple[Any, ...], c: Any) -> str:
    cls, dtype, device, shape, stride, requires_grad = meta[:6]
    if None in shape:
        return _dynamic_tensor_check(v, meta, c)
    return (
        f"type({v}) is {c(cls)} and {v}.dtype is {c(dtype)} and {v}.shape == {c(shape)} "
        f"and {v}.stride() == {c(stride)} and {v}.device == {c(device)} "
        f"and {v}.requires_grad is {requires_grad}{_flags_check(v, meta[6:], c)}"
    )


def _flags_check(v: str, rest: tuple[Any, ...], c: Any) -> str:
    """The tensor properties past strides a program may read (see ``tensor_flags``)."""
    if not rest:
        return ""
    # (is_leaf is left out: guarded on every tensor it splits records that aot_eager then
    # fails on; a read of it must be guarded where it is read)
    offset, _leaf, inference, conj, neg, layout, names = rest[0]
    checks = [f"{v}.is_inference() is {bool(inference)}"]
    checks += [f"{v}.is_conj() is {bool(conj)}", f"{v}.is_neg() is {bool(neg)}"]
    checks.append(f"{v}.layout is {c(layout)}")
    if offset is not None:
        checks.append(f"{v}.storage_offset() == {int(offset)}")
    if names is not None:  # (an unnamed tensor's names are all None: checked by the layout)
        checks.append(f"{v}.names == {c(tuple(names))}")
    return "".join(f" and {x}" for x in checks)


def _dynamic_tensor_check(v: str, meta: tuple[Any, ...], c: Any) -> str:
    """A tensor with dynamic dims (``None`` in the shape): static sizes, ``>= 2``, layout."""
    cls, dtype, device, shape, layout, requires_grad = meta[:6]
    sizes = " and ".join(
        f"{v}.shape[{d}] >= 2" if n is None else f"{v}.shape[{d}] == {int(n)}"
        for d, n in enumerate(shape)
    )
    if layout == "contiguous":
        strides = f"{v}.is_contiguous()"
    elif layout == "channels_last":
        strides = f"{v}.is_contiguous(memory_format={c(torch.channels_last)})"
    else:
        raise InternalError(f"unknown layout {layout!r} of a dynamic tensor")
    return (
        f"type({v}) is {c(cls)} and {v}.dtype is {c(dtype)} and {v}.dim() == {len(shape)} "
        f"and {sizes} and {strides} and {v}.device == {c(device)} "
        f"and {v}.requires_grad is {requires_grad}{_flags_check(v, meta[6:], c)}"
    )


_FLAT_ITEMS = (int, str, bool)


def _flat_tuple_check(v: str, value: Any, c: Any) -> str | None:
    """A tuple (or ``torch.Size``) of ints, strs and bools: its type, its items' types and
    ``==`` (what ``exact_token`` decides, without building tokens on every check)."""
    if type(value) not in (tuple, torch.Size) or len(value) > 16:
        return None
    if not all(type(x) in _FLAT_ITEMS for x in value):
        return None
    lit = literal_expr(tuple(value))
    if lit is None:
        return None
    kinds = "".join(f"{type(x).__name__}, " for x in value)
    return f"type({v}) is {c(type(value))} and tuple(map(type, {v})) == ({kinds}) and {v} == {lit}"


def _value_check(v: str, value: Any, c: Any) -> str:
    """``v`` is ``value``'s type and value exactly, running no user code (see exact_token)."""
    if value is None or value is True or value is False or value is Ellipsis:
        return f"{v} is {value!r}"
    kind = type(value)
    lit = literal_expr(value)
    if lit is not None and (kind is int or kind is str or kind is bytes):
        return f"type({v}) is {kind.__name__} and {v} == {lit}"
    if lit is not None and kind is float and value != 0.0:
        return f"type({v}) is float and {v} == {lit}"  # (no other float equals it)
    if isinstance(value, enum.Enum):
        return f"{v} is {c(value)}"
    flat = _flat_tuple_check(v, value, c)
    if flat is not None:
        return flat
    exact = f"{c(exact_token)}({v}) == {c(exact_token(value))}"
    if immutable_value(value):  # the recorded object itself: nothing to compute
        return f"({v} is {c(value)} or {exact})"
    c(value)  # (kept alive: tokens of some values hold ids)
    return exact


# ``d``'s keys in iteration order, running no user code: an ``OrderedDict`` (or any subclass of
# it: transformers' ``ModelOutput``) keeps its own order (``move_to_end``), which ``dict.keys``
# does not see. Chosen in the guard by ``issubclass(type(d), OrderedDict)``: C calls only (not
# ``isinstance``, which may read a ``__class__`` property), and no lookup by exact type, which
# would miss a subclass
def _keys_in_order(v: str, c: Any) -> str:
    ordered = f"issubclass(type({v}), {c(collections.OrderedDict)})"
    return f"({c(collections.OrderedDict.keys)} if {ordered} else {c(dict.keys)})({v})"


def _keys_check(v: str, keys: tuple[Any, ...], c: Any) -> str:
    # the keys of a dict in order, each of the same type and value exactly
    c(keys)
    if not keys:
        return f"{c(dict.__len__)}({v}) == 0"
    if all(type(k) in (str, int, bytes) for k in keys):  # (their == is the builtin one)
        types = tuple(type(k) for k in keys)
        listed = _keys_in_order(v, c)
        return f"tuple(map(type, {listed})) == {c(types)} and tuple({listed}) == {c(keys)}"
    token = tuple(exact_token(k) for k in keys)
    listed = _keys_in_order(v, c)
    return f"tuple(map({c(exact_token)}, {listed})) == {c(token)}"


# the hooks torch calls around every module's call (``register_module_forward_hook`` ...):
# checked once per guard that calls a module (``_global_hooks_check``), not once per module
_GLOBAL_HOOKS = (
    mm._global_backward_pre_hooks,
    mm._global_backward_hooks,
    mm._global_forward_hooks,
    mm._global_forward_pre_hooks,
)


def _global_hooks_check(c: Any) -> str:
    return f"not ({' or '.join(c(d) for d in _GLOBAL_HOOKS)})"


def _module_call_check(v: str, payload: ModuleCall, c: Any) -> str:
    checks = [] if payload.grad_off else [f"not ({v}._backward_hooks or {v}._backward_pre_hooks)"]
    if not payload.own_forward:  # (else the instance's forward is guarded on its own path)
        checks.append(f"'forward' not in {v}.__dict__")
    return " and ".join(checks) or "True"


def _module_no_hooks_check(v: str, payload: ModuleNoHooks, c: Any) -> str:
    return f"not ({v}._forward_hooks or {v}._forward_pre_hooks)"


def _not_in_instance_dict_check(v: str, payload: NotInInstanceDict, c: Any) -> str:
    key = literal_expr(payload.name) or c(payload.name)
    return f"{key} not in {v}.__dict__"


def _no_plain_attr_check(v: str, payload: NoPlainAttr, c: Any) -> str:
    return f"{c(plain_attr_absent)}({v}, {literal_expr(payload.name) or c(payload.name)})"


def _iter_len_check(v: str, payload: IterLen, c: Any) -> str:
    # a loop's iterator that the record takes values from: at least that many left, or
    # exactly that many where the record saw the loop end (``v``: what it has left, see
    # ``_emit_checks``)
    op = "==" if payload.exact else ">="
    check = f"len({v}) {op} {int(payload.n)}"
    if payload.below is not None and not payload.exact:
        check = f"{int(payload.n)} <= len({v}) < {int(payload.below)}"
    return check


def _outcome_check(v: str, payload: Outcome, c: Any) -> str:
    # a branch on arithmetic over a promoted scalar: the same outcome, whatever the value
    # (computed once: the value check may name it twice, and a read such as a cached
    # function's call counts)
    got = "__magpy_outcome"
    check = f"(({got} := {c(payload.fn)}({v})) is {got} and {_value_check(got, payload.value, c)})"
    if type(payload.fn) is CodeOf and payload.value is True:
        # a function still runs its code: its own code object, else an instrumented copy
        return f"({v}.__code__ is {c(payload.fn.original)} or {check})"
    return check


def _set_items_check(v: str, payload: SetItems, c: Any) -> str:
    # a set from outside: the same values of the same types (order free)
    return f"{c(set_contents)}({v}) == {c(payload.items)}"


def _set_order_check(v: str, payload: SetOrder, c: Any) -> str:
    # a set from outside that the record iterates: the same values in the same order
    return f"{c(set_order)}({v}) == {c(payload.order)}"


# the emitter of each CUSTOM payload class (payload type -> check on variable ``v``)
_CUSTOM_CHECKS: dict[type[CustomPayload], Callable[[str, Any, Any], str]] = {
    ModuleCall: _module_call_check,
    ModuleNoHooks: _module_no_hooks_check,
    NotInInstanceDict: _not_in_instance_dict_check,
    NoPlainAttr: _no_plain_attr_check,
    IterLen: _iter_len_check,
    Outcome: _outcome_check,
    SetItems: _set_items_check,
    SetOrder: _set_order_check,
}


def _custom_check(v: str, payload: Any, c: Any) -> str:
    emit = _CUSTOM_CHECKS.get(type(payload))
    if emit is None:
        raise InternalError(f"unknown custom guard {payload!r}")
    return emit(v, payload, c)


def check_expr(req: GuardReq, v: str, c: Any) -> str:
    """The boolean expression for one requirement on variable ``v``."""
    kind, payload = req.kind, req.payload
    if kind is GuardKind.ID:
        return f"{v} is {c(payload)}"
    if kind is GuardKind.TYPE:
        return f"type({v}) is {c(payload)}"
    if kind is GuardKind.NONE:
        return f"{v} is None"
    if kind is GuardKind.NOT_NONE:
        return f"{v} is not None"
    if kind is GuardKind.VALUE:
        return _value_check(v, payload, c)
    if kind is GuardKind.LEN:
        return f"len({v}) == {int(payload)}"  # type: ignore[call-overload]
    if kind is GuardKind.KEYS:
        return _keys_check(v, tuple(payload), c)  # type: ignore[arg-type]
    if kind is GuardKind.HASATTR:
        return f"hasattr({v}, {c(payload)})"
    if kind is GuardKind.NOT_HASATTR:
        return f"not hasattr({v}, {c(payload)})"
    if kind is GuardKind.TENSOR_META:
        return _tensor_check(v, payload, c)  # type: ignore[arg-type]
    if kind is GuardKind.CUSTOM:
        return _custom_check(v, payload, c)
    raise InternalError(f"no emitter for guard kind {kind}")


def _pinned_sizes(reqs: list[tuple[GuardReq, bool]]) -> dict[Path, Any]:
    """Tensors with a dynamic check and also a static one (the record fixed the sizes its
    dynamic check leaves free, e.g. a whole-call record's trip count ``range(x.size(0))``): the
    static check, which the dynamic one's place then checks in Python. The C++ batch at the
    guard's end checks it too, but a record of another trip count is told apart early, before
    the walk through the modules: the other records of a loop fail there fast."""
    static: dict[Path, Any] = {}
    dynamic: set[Path] = set()
    for req, check in reqs:
        if check and req.kind is GuardKind.TENSOR_META:
            meta = cast(Any, req.payload)
            if None in meta[3]:
                dynamic.add(req.path)
            else:
                static.setdefault(req.path, meta)
    return {p: static[p] for p in dynamic if p in static}


def _emit_checks(
    reqs: Iterable[tuple[GuardReq, bool]], pv: PathVars, body: list[str], ind: str, c: Any
) -> None:
    """The requirements' checks (those paired with True; the others' paths are evaluated
    only), each path evaluated once: the checks of one path in one ``if`` (in order,
    short-circuiting), the static tensors all in one C++ call at the end."""
    tensors = TensorBatch()
    pending: list[str] = []
    pending_path: Path | None = None
    reqs = list(reqs)
    pinned = _pinned_sizes(reqs)

    def flush() -> None:
        if pending:
            exprs = pending[0] if len(pending) == 1 else " and ".join(f"({e})" for e in pending)
            body.append(f"{ind}if not ({exprs}): return None")
            pending.clear()

    for req, check in reqs:
        if req.path != pending_path:
            flush()  # (before the next path's evaluation lines)
            pending_path = req.path
        v = pv.var(req.path)
        if not check:
            continue
        if req.kind is GuardKind.TENSOR_META and tensors.add(v, cast(Any, req.payload)):
            continue  # (checked with the others, below)
        if req.kind is GuardKind.TENSOR_META and req.path in pinned:
            req = GuardReq(req.path, req.kind, pinned[req.path])  # (fails early, see below)
        if req.kind is GuardKind.CUSTOM and type(req.payload) is IterLen:
            v = pv.remaining_of(v)  # (evaluated once, with the items the guard reads)
        pending.append(check_expr(req, v, c))
    flush()
    body += tensors.lines(c, ind)


def _emit_memo(
    plan: Plan, pv: PathVars, body: list[str], ind: str, c: Any, split: MemoPlan
) -> Memo:
    """The guard in two parts (see ``_memo``): the stable part under ``if the memo does not
    hold``, ending in ``Memo.arm``; then (after a placeholder for taking the memo's variables,
    see ``_finish_memo``) the per-call part."""
    reqs = list(plan.guards)
    inner = ind + "    "
    memo = Memo()
    anchor = pv.root_expr(Access(AccessKind.LOCAL, split.anchor))
    body.append(f"{ind}__magpy_m = {c(memo.valid)}({anchor})")
    body.append(f"{ind}if __magpy_m is None:")
    pv.lines, pv.indent = body, inner
    _emit_checks(
        ((r, i in split.checks) for i, r in enumerate(reqs) if r.path in split.safe),
        pv, body, inner, c,
    )  # fmt: skip
    aliases = [(a, b) for a, b in plan.aliases if a in split.safe and b in split.safe]
    for a, b in aliases:
        body.append(f"{inner}if {pv.var(a)} is not {pv.var(b)}: return None")
    for p in (*plan.inputs, *plan.distinct):
        if p in split.safe:
            pv.var(p)
    memo.distinct = [p for p in plan.distinct if p in split.safe]
    if memo.distinct:  # (distinct from each other once: the per-call part checks the rest)
        ids = ", ".join(f"id({pv.var(p)})" for p in memo.distinct)
        body.append(f"{inner}__magpy_ids = frozenset(({ids},))")
        body.append(f"{inner}if len(__magpy_ids) != {len(memo.distinct)}: return None")
    names = dict(pv.vars)
    index = {path: i for i, path in enumerate(names)}
    memo.entries = [
        (None, path.root) if path.parent is None else (index[path.parent], path.steps[-1])
        for path in names
    ]
    memo.checks = [(index[r.path], r) for i, r in enumerate(reqs) if i in split.checks]
    memo.written = [index[p] for p in split.written if p in index]
    memo.names = list(names.values())
    memo.paths = list(names)
    ids_arg = ", __magpy_ids" if memo.distinct else ""
    body.append(f"{inner}{c(memo.arm)}({anchor}, ({', '.join(names.values())},){ids_arg})")
    body.append(_MEMO_PLACEHOLDER)
    pv.lines, pv.indent = body, ind
    _emit_checks(
        ((r, i not in split.checks) for i, r in enumerate(reqs)), pv, body, ind, c
    )  # fmt: skip
    in_stable = set(aliases)
    for a, b in plan.aliases:
        if (a, b) not in in_stable:
            body.append(f"{ind}if {pv.var(a)} is not {pv.var(b)}: return None")
    return memo


_MEMO_PLACEHOLDER = "#memo"


def _finish_memo(memo: Memo, body: list[str], ret: str, ind: str) -> None:
    """Fill the placeholder: the memo's variables that the rest of the guard uses."""
    at = body.index(_MEMO_PLACEHOLDER)
    used = set(_NAME.findall("\n".join(body[at + 1 :]) + ret))
    needed = [i for i, name in enumerate(memo.names) if name in used]
    memo.needed = needed
    unpacked = [memo.names[i] for i in needed] + (["__magpy_ids"] if memo.distinct else [])
    if not unpacked:
        del body[at]
        return
    names = ", ".join(unpacked)
    body[at : at + 1] = [f"{ind}else:", f"{ind}    {names}, = __magpy_m"]


_NAME = re.compile(r"\bv\d+\b")


def _emit_entry_checks(
    plan: Plan, pv: PathVars, body: list[str], ind: str, c: Any, memo: Any
) -> Memo | None:
    """The requirements and aliases (in two parts where ``memo``, a ``MemoPlan``, says what is
    stable)."""
    if any(isinstance(req.payload, ModuleCall) for req in plan.guards):
        body.append(f"{ind}if not ({_global_hooks_check(c)}): return None")
    if memo is not None:
        return _emit_memo(plan, pv, body, ind, c, memo)
    _emit_checks(((r, True) for r in plan.guards), pv, body, ind, c)
    for a, b in plan.aliases:
        body.append(f"{ind}if {pv.var(a)} is not {pv.var(b)}: return None")
    return None


def _emit_inputs(
    plan: Plan, pv: PathVars, body: list[str], ind: str, c: Any, shape_check: Any, memo: Any
) -> str:
    """The distinctness check, and the graph's inputs: the expression the guard returns.
    With a ``memo`` whose stable part checked its own paths distinct (``__magpy_ids``), the
    others are checked against those."""
    stable = memo.distinct if memo is not None else []
    in_stable = set(stable)
    distinct = [pv.var(p) for p in plan.distinct if p not in in_stable]
    if stable and len(distinct) == 1:
        body.append(f"{ind}if id({distinct[0]}) in __magpy_ids: return None")
    elif stable and distinct:
        ids = ", ".join(f"id({x})" for x in distinct)
        body.append(
            f"{ind}if len({{{ids}}}) != {len(distinct)} or not "
            f"__magpy_ids.isdisjoint(({ids},)): return None"
        )
    elif len(distinct) > 1:
        body.append(
            f"{ind}if len({{{', '.join(f'id({x})' for x in distinct)}}}) != "
            f"{len(distinct)}: return None"
        )
    inputs = [pv.var(p) for p in plan.inputs]
    for i in plan.scalar_inputs:  # promoted Python scalars enter the graph as 0-d tensors
        inputs[i] = f"{c(scalar_tensor)}({inputs[i]})"
    for i in plan.array_inputs:  # numpy arrays from outside: a tensor over their memory
        inputs[i] = f"{c(torch.from_numpy)}({inputs[i]})"
    ret = f"({', '.join(inputs)},)" if inputs else "()"
    if shape_check is not None and inputs:
        body.append(f"{ind}__magpy_inputs = {ret}")
        body.append(f"{ind}if not {c(shape_check)}(*__magpy_inputs): return None")
        ret = "__magpy_inputs"
    return ret


def generate_guard(
    plan: Plan,
    names: NameAllocator,
    *,
    grad_enabled: bool,
    qualname: str = "",
    roots: str = "call",
    shape_check: Any = None,
    ambient: tuple[Any, Any] | None = None,
    memo: MemoPlan | None = None,
) -> GeneratedCode:
    """The guard of ``plan`` as generated source (function ``__magpy_guard``).

    ``roots="call"``: ``__magpy_guard(fn, args, kwargs)`` for whole calls; ``roots="frame"``:
    ``__magpy_guard(L, S)`` for sites (the frame's locals and the stack values at the site).
    ``shape_check``: ``check(*inputs) -> bool`` over the graph inputs, the relations between
    dynamic sizes the compiled graph relies on (see ``magpy_codegen.shape_guard``).
    ``ambient``: ``(state_fn, value)``: thread state the record was made under (autocast, the
    default dtype...), compared as ``state_fn() == value``.
    ``memo``: what ``_memo.classify`` found stable: the guard skips that part while its
    ``Memo`` (``GeneratedCode.memo``) holds and the memo's anchor (``fn``, or a site's local)
    is the object it was armed with.
    """
    body: list[str] = []
    ind = "        "
    pv = PathVars(names, body, ind, roots)
    c = names.const
    body.append(f"{ind}if {c(torch.is_grad_enabled)}() is not {grad_enabled}: return None")
    memo_obj = _emit_entry_checks(plan, pv, body, ind, c, memo)
    ret = _emit_inputs(plan, pv, body, ind, c, shape_check, memo_obj)
    if memo_obj is not None:
        _finish_memo(memo_obj, body, ret, ind)
    if ambient is not None:  # (last: it costs a few torch calls, and rarely decides)
        body.append(f"{ind}if {c(ambient[0])}() != {c(ambient[1])}: return None")
    body.append(f"{ind}return {ret}")
    if any(hooked_tensor_type(v) for v in list(names.consts.values())):
        # a tensor subclass with __torch_function__: the guard's reads of its metadata are
        # MagPy's own and must not reach the program's hook
        body = [f"{ind}with {c(torch._C.DisableTorchFunctionSubclass)}():"] + [
            "    " + line for line in body
        ]
    src = [
        comment(f"guard of {qualname}"),
        "def __magpy_guard(fn, args, kwargs):" if roots == "call" else "def __magpy_guard(L, S):",
        "    try:",
        *body,
        "    except Exception:",
        "        return None",
        "",
    ]
    return GeneratedCode("\n".join(src), dict(names.consts), "guard", memo=memo_obj)
