"""A record's ingredients as bytes, and back: the codec of persistent records (``_store``).

What ``build_record`` needs (plan, fx graph, flags) is pickled with a restricted pickler.
Plain immutables, containers, MagPy's plan and refgraph types, the fx graph (as a node table)
and torch's dtypes, devices, layouts, sizes and operator overloads are stored by value.
Classes, functions, builtins and modules are stored *by reference*: a (module, qualified name)
pair, checked to give back the very object in the storing process, in a table next to the
pickle (``Encoded.refs``). Anything else (an instance a guard compares by identity, a lambda,
a closure, a tensor, a code object made by the run) makes the record not storable
(``Unstorable``).

A referenced object may have changed in the process that loads the entry (the user edited a
function the program calls, or a class's method): every referenced user function and class
carries a ``fingerprint`` of its code, compared before anything is unpickled
(``resolve_refs``). Objects of torch, MagPy and the standard library carry none: the entry's
versions cover them. Unpickling resolves references only from that verified table
(``persistent_load``); ``find_class`` refuses everything.
"""

from __future__ import annotations

import enum
import hashlib
import importlib
import io
import pickle
import sys
import types
from collections.abc import Iterable
from typing import Any

import attrs
import torch
import torch.fx as fx

import magpy_refgraph as rg
from magpy_monitor import ORIGINAL_CODE, REGION, CodeOf, Defines
from magpy_refgraph import Access, AccessKind, GuardKind, GuardReq, GuardSet, Path

__all__ = [
    "Encoded",
    "NodeRef",
    "Unstorable",
    "decode",
    "decode_graph",
    "encode",
    "encode_graph",
    "fingerprint",
    "function_digest",
    "is_library",
    "resolve_refs",
]

Ref = tuple[str, str, "str | None"]  # module, qualified name, fingerprint (None: a library's)


class Unstorable(Exception):
    """The record holds something that cannot be stored (the message says what)."""


_LIBRARY_ROOTS = frozenset(
    {"torch", "magpy", "magpy_refgraph", "magpy_monitor", "magpy_codegen", "magpy_runtime"}
) | frozenset(sys.stdlib_module_names)


def is_library(module: str | None) -> bool:
    """Whether objects of ``module`` are covered by the versions an entry records (torch,
    MagPy, the standard library) rather than by fingerprints of their code."""
    return module is not None and module.split(".")[0] in _LIBRARY_ROOTS


# ----------------------------------------------------------------------------- fingerprints
def _token(value: Any) -> str:
    """A text for a constant that is the same in every process (a frozenset's items sorted:
    their iteration order depends on string hashing)."""
    if isinstance(value, types.CodeType):
        return _code_digest(value)
    if type(value) is tuple:
        return "(" + ",".join(_token(v) for v in value) + ")"
    if type(value) is frozenset:
        return "frozenset(" + ",".join(sorted(_token(v) for v in value)) + ")"
    if type(value) in (int, float, complex, str, bytes, bool) or value is None or value is ...:
        return f"{type(value).__name__}:{value!r}"
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def _code_digest(code: types.CodeType) -> str:
    code = ORIGINAL_CODE.get(code, code)  # (a function split into sites: its own code)
    h = hashlib.sha256(code.co_code)
    shape = (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags)
    h.update(repr((shape, code.co_names, code.co_varnames, code.co_freevars)).encode())
    for const in code.co_consts:
        h.update(_token(const).encode())
    return h.hexdigest()


def function_digest(fn: types.FunctionType) -> str:
    """A digest of ``fn``'s qualified name, code (recursively) and defaults."""
    parts = [fn.__qualname__, _code_digest(fn.__code__), _token(fn.__defaults__)]
    kwdefaults = fn.__kwdefaults__ or {}
    parts += [f"{k}={_token(v)}" for k, v in sorted(kwdefaults.items())]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _member_token(value: Any, seen: set[int]) -> str:
    if isinstance(value, staticmethod | classmethod):
        value = value.__func__
    if isinstance(value, property):
        return "property:" + ",".join(_member_token(f, seen) for f in (value.fget, value.fset))
    if isinstance(value, types.FunctionType):
        return function_digest(value)
    if isinstance(value, type) and not is_library(value.__module__):
        return _class_digest(value, seen)
    return _token(value)


def _class_digest(cls: type, seen: set[int]) -> str:
    if id(cls) in seen:
        return f"<cycle {cls.__qualname__}>"
    seen.add(id(cls))
    parts = [cls.__qualname__]
    for base in cls.__bases__:
        own = not is_library(base.__module__)
        parts.append(_class_digest(base, seen) if own else f"{base.__module__}.{base.__qualname__}")
    for name, value in sorted(vars(cls).items()):
        if name not in ("__dict__", "__weakref__", "__doc__", "__module__"):
            parts.append(f"{name}:{_member_token(value, seen)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def fingerprint(obj: Any) -> str | None:
    """A digest of what a user function or class runs: a function's code (recursively: its
    bytecode, constants, names) and defaults; a class's bases and its own attributes (their
    names, its functions' digests). None for other objects and for library ones."""
    if not is_library(getattr(obj, "__module__", None)):
        if isinstance(obj, types.FunctionType):
            return function_digest(obj)
        if isinstance(obj, type):
            return _class_digest(obj, set())
    return None


# ----------------------------------------------------------------------------- references
def _lookup(module: str, qualname: str) -> Any:
    """The object at ``module``.``qualname`` among the imported modules (None: not there)."""
    obj: Any = sys.modules.get(module)
    try:
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception:  # (a failing attribute or __getattr__ of the program's: not found)
        return None
    return obj if module in sys.modules else None


# the builtin types found by name only in ``types`` (``module``, ``NoneType``, ``function``...)
_TYPES = {id(v): name for name, v in vars(types).items() if isinstance(v, type)}


def _candidates(obj: Any) -> Iterable[tuple[str, str]]:
    if id(obj) in _TYPES:
        yield "types", _TYPES[id(obj)]
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    name = getattr(obj, "__name__", None)
    if isinstance(module, str):
        if isinstance(qualname, str):
            yield module, qualname
        if isinstance(name, str):
            yield module, name
    owner = getattr(obj, "__objclass__", None)
    if owner is None and not isinstance(obj, types.ModuleType):
        owner = getattr(obj, "__self__", None)
    if isinstance(owner, types.ModuleType) and isinstance(name, str):
        yield owner.__name__, name
    elif isinstance(owner, type) and isinstance(name, str):
        yield owner.__module__, f"{owner.__qualname__}.{name}"


def reference(obj: Any) -> tuple[str, str]:
    """Where ``obj`` is found by name: (module, qualified name), checked to give ``obj``."""
    for module, qualname in _candidates(obj):
        if "<" not in qualname and _lookup(module, qualname) is obj:
            return module, qualname
    raise Unstorable(f"{obj!r} cannot be found by its name (a local or made object)")


_BY_REFERENCE = (
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.ClassMethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
)


def _module_of_file(filename: str) -> str | None:
    for name, module in list(sys.modules.items()):
        if getattr(module, "__file__", None) == filename:
            return name
    return None


def _code_reference(code: types.CodeType) -> tuple[str, str, types.FunctionType]:
    """The function found by name that runs ``code`` (a ``CodeOf`` guard's code)."""
    module = _module_of_file(code.co_filename)
    fn = _lookup(module, code.co_qualname) if module is not None else None
    if (
        not isinstance(fn, types.FunctionType)
        or ORIGINAL_CODE.get(fn.__code__, fn.__code__) is not code
    ):
        raise Unstorable(f"the code of {code.co_qualname} belongs to no function found by name")
    assert module is not None
    return module, code.co_qualname, fn


def _code_of(fn: types.FunctionType) -> CodeOf:
    """``CodeOf`` the function ``fn`` runs now (its own code, were it split into sites)."""
    return CodeOf(ORIGINAL_CODE.get(fn.__code__, fn.__code__))


def _torch_attr(name: str) -> Any:
    value = getattr(torch, name)
    if not isinstance(value, torch.dtype | torch.layout | torch.memory_format):
        raise pickle.UnpicklingError(f"torch.{name} is no dtype, layout or memory format")
    return value


def _op(namespace: str, name: str, overload: str | None) -> Any:
    packet = getattr(getattr(torch.ops, namespace), name)
    return packet if overload is None else getattr(packet, overload)


def _module_dict(module: types.ModuleType) -> dict[str, Any]:
    return vars(module)


@attrs.frozen
class NodeRef:
    """An fx node in an encoded graph's arguments: the ``index``-th row."""

    index: int


# ----------------------------------------------------------------------------- identity
def _identity_safe(value: Any) -> bool:
    """Whether a copy of ``value`` (or the object found again by name) is as good as the
    object itself where a guard or a mock uses it by identity."""
    if rg.immutable_value(value) or isinstance(value, (*_BY_REFERENCE, types.ModuleType)):
        return True
    if isinstance(value, torch.dtype | torch.layout | torch.memory_format | CodeOf):
        return True
    if isinstance(value, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return True
    if type(value) is tuple or type(value) is frozenset:
        return all(_identity_safe(v) for v in value)
    return isinstance(value, torch.device | torch.Size | enum.Enum)


def _require_identity(value: Any, where: str) -> None:
    if not _identity_safe(value):
        raise Unstorable(f"{where} is a {type(value).__qualname__} compared by identity")


def _no_member_ids(tokens: Any) -> None:
    """Set payloads hold ``exact_token``s; an enum member's token is its id in this process."""
    stack = [tokens]
    while stack:
        item = stack.pop()
        if type(item) is tuple or type(item) is frozenset:
            if len(item) == 3 and type(item) is tuple and item[1] == "member":
                raise Unstorable("a set of enum members (guarded by their ids)")
            stack.extend(item)


# ----------------------------------------------------------------------------- the pickler
_PLAIN: frozenset[type] = frozenset(
    {
        rg.FromPath, rg.GraphOut, rg.Build, rg.Apply, rg.SetAttr, rg.DelAttr, rg.SetItem,
        rg.DelItem, rg.ReplaceContents, rg.AdvanceIter, rg.AppendItem, rg.CallMethod, rg.Check,
        rg.Plan, NodeRef, slice, range, complex,
    }
)  # fmt: skip
_TORCH_NAMED = (torch.dtype, torch.layout, torch.memory_format)


class _Pickler(pickle.Pickler):
    """Pickles by value what may be copied, by reference (``refs``) what is found by name,
    and raises ``Unstorable`` for anything else."""

    def __init__(self, buffer: io.BytesIO) -> None:
        super().__init__(buffer, protocol=5)
        self.refs: list[Ref] = []
        self._index: dict[tuple[str, str], int] = {}
        self._dicts: dict[int, str] | None = None

    def _ref(self, module: str, qualname: str, obj: Any) -> int:
        at = self._index.get((module, qualname))
        if at is None:
            at = self._index[module, qualname] = len(self.refs)
            self.refs.append((module, qualname, fingerprint(obj)))
        return at

    def _module_dict(self, obj: dict[str, Any]) -> str | None:
        if self._dicts is None:
            self._dicts = {id(vars(m)): name for name, m in list(sys.modules.items()) if m}
        return self._dicts.get(id(obj))

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, types.ModuleType):
            if sys.modules.get(obj.__name__) is not obj:
                raise Unstorable(f"module {obj.__name__} is not the one imported under its name")
            return self._ref(obj.__name__, "", obj)
        if type(obj) is dict:
            name = self._module_dict(obj)
            return None if name is None else self._ref(name, "__dict__", obj)
        if isinstance(obj, _BY_REFERENCE):
            return self._ref(*reference(obj), obj)
        return None

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is Access:
            return Access, (obj.kind, self._access_key(obj), self._scope(obj.scope))
        if kind is Path:
            return Path, (obj.root, obj.steps)
        if kind is GuardReq:
            if obj.kind in (GuardKind.ID, GuardKind.TYPE):
                self._require_identity(obj.payload, f"the payload of guard {obj}")
            return GuardReq, (obj.path, obj.kind, obj.payload)
        if kind is GuardSet:
            return GuardSet, (list(obj),)
        if kind is rg.Constant:
            self._require_identity(obj.value, "a constant of the plan")
            return rg.Constant, (obj.value,)
        if kind is CodeOf:
            return _code_of, (_code_reference(obj.original)[2],)
        if kind is Defines:  # (a guard's read: ``name in namespace``)
            return Defines, (obj.name,)
        if kind is rg.SetItems or kind is rg.SetOrder:
            _no_member_ids(obj.items if kind is rg.SetItems else obj.order)
            return NotImplemented
        return _reduce_value(obj)

    def _access_key(self, access: Access) -> Any:
        if access.kind is AccessKind.CONST:
            self._require_identity(access.key, f"the constant root {access}")
        elif access._identity:
            raise Unstorable(f"the unhashable key of {access} (compared by identity)")
        return access.key

    def _scope(self, scope: Any) -> Any:
        if scope is not None:
            self._require_identity(scope, "the scope of a global or cell")
        return scope

    def _require_identity(self, value: Any, where: str) -> None:
        """``value`` is used by identity: it must be found again by name (a module's
        namespace included), or be a value whose copy is as good."""
        if not (type(value) is dict and self._module_dict(value) is not None):
            _require_identity(value, where)


def _reduce_value(obj: Any) -> Any:
    """How a value of torch or MagPy is pickled (``NotImplemented``: as pickle does)."""
    kind = type(obj)
    if isinstance(obj, _TORCH_NAMED):
        name = str(obj).removeprefix("torch.")
        if getattr(torch, name, None) is not obj:
            raise Unstorable(f"{obj!r} is not torch.{name}")
        return _torch_attr, (name,)
    if kind is torch.device:
        return torch.device, (str(obj),)
    if kind is torch.Size:
        return torch.Size, (tuple(obj),)
    if kind is torch._ops.OpOverload:
        return _op, (obj.namespace, obj._opname, obj._overloadname)
    if kind is torch._ops.OpOverloadPacket:
        namespace, name = obj._qualified_op_name.split("::")
        return _op, (namespace, name, None)
    if kind in _PLAIN or isinstance(obj, enum.Enum):
        return NotImplemented
    if isinstance(obj, rg.CustomPayload) and kind.__module__.startswith("magpy_refgraph"):
        return NotImplemented
    raise Unstorable(f"a {kind.__module__}.{kind.__qualname__} object")


@attrs.frozen
class Encoded:
    """A pickle and the table of the objects it refers to by name."""

    refs: tuple[Ref, ...]
    payload: bytes


def encode(obj: Any) -> Encoded:
    """``obj`` pickled with references by name (raises ``Unstorable``)."""
    buffer = io.BytesIO()
    pickler = _Pickler(buffer)
    try:
        pickler.dump(obj)
    except Unstorable:
        raise
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as exc:
        raise Unstorable(f"{type(exc).__name__}: {exc}") from exc
    return Encoded(tuple(pickler.refs), buffer.getvalue())


def resolve_refs(refs: Iterable[Ref]) -> list[Any] | tuple[str, bool]:
    """The objects an entry refers to, found by name in this process; or why the entry
    cannot be used and whether it is stale (a user function or class whose code changed:
    the entry can never be used again), or not (an object not found). A module
    that is not imported yet is imported only if it belongs to torch, MagPy or the standard
    library: the program imports its own before it calls what it compiled."""
    found: list[Any] = []
    for module, qualname, digest in refs:
        if module not in sys.modules and is_library(module):
            try:
                importlib.import_module(module)
            except Exception as exc:  # (an import error of another version: not usable)
                return f"module {module} cannot be imported: {type(exc).__name__}", False
        obj = sys.modules.get(module) if not qualname else _lookup(module, qualname)
        if obj is None:
            return f"{module}.{qualname} is not found (not imported, or renamed)", False
        if fingerprint(obj) != digest:
            return f"the code of {module}.{qualname} changed since the record was stored", True
        found.append(obj)
    return found


class _Unpickler(pickle.Unpickler):
    def __init__(self, payload: bytes, resolved: list[Any]) -> None:
        super().__init__(io.BytesIO(payload))
        self._resolved = resolved

    def persistent_load(self, pid: Any) -> Any:
        if type(pid) is not int or not 0 <= pid < len(self._resolved):
            raise pickle.UnpicklingError(f"unknown reference {pid!r}")
        return self._resolved[pid]

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not in the entry's references")


def decode(payload: bytes, resolved: list[Any]) -> Any:
    """What ``encode`` pickled, references taken from ``resolved`` (``resolve_refs``)."""
    return _Unpickler(payload, resolved).load()


# ----------------------------------------------------------------------------- fx graphs
# node meta that codegen reads (the rest is the monitor's, or tensors of the recording call)
_META = ("dyn_shape", "effect", "copied_view", "stack_trace", REGION)  # (REGION: a tuple)
Row = tuple[str, str, Any, Any, Any, dict[str, Any]]


def encode_graph(graph: fx.Graph) -> tuple[Row, ...]:
    """``graph`` as rows (op, name, target, args, kwargs, meta), nodes in arguments as
    ``NodeRef``s (targets and constants are pickled with the rows)."""
    index: dict[fx.Node, int] = {}
    rows: list[Row] = []
    for i, node in enumerate(graph.nodes):
        index[node] = i
        meta = {k: node.meta[k] for k in _META if type(node.meta.get(k)) in (bool, str, tuple)}
        args, kwargs = _args(node.args, index), _args(node.kwargs, index)
        rows.append((node.op, node.name, node.target, args, kwargs, meta))
    return tuple(rows)


def _args(value: Any, index: dict[fx.Node, int]) -> Any:
    if isinstance(value, fx.Node):
        return NodeRef(index[value])
    if type(value) is tuple or isinstance(value, list):
        items = [_args(v, index) for v in value]
        return tuple(items) if type(value) is tuple else items
    if isinstance(value, dict):
        return {k: _args(v, index) for k, v in value.items()}
    if type(value) is slice:
        return slice(*(_args(v, index) for v in (value.start, value.stop, value.step)))
    return value


def decode_graph(rows: tuple[Row, ...]) -> fx.Graph:
    """The fx graph of ``encode_graph``'s rows."""
    graph = fx.Graph()
    nodes: list[fx.Node] = []
    for op, name, target, args, kwargs, meta in rows:
        node = graph.create_node(
            op, target, _unargs(args, nodes), _unargs(kwargs, nodes), name=name
        )
        node.meta.update(meta)
        nodes.append(node)
    return graph


def _unargs(value: Any, nodes: list[fx.Node]) -> Any:
    if type(value) is NodeRef:
        return nodes[value.index]
    if type(value) is tuple or type(value) is list:
        items = [_unargs(v, nodes) for v in value]
        return tuple(items) if type(value) is tuple else items
    if type(value) is dict:
        return {k: _unargs(v, nodes) for k, v in value.items()}
    if type(value) is slice:
        return slice(*(_unargs(v, nodes) for v in (value.start, value.stop, value.step)))
    return value
