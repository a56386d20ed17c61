"""A record's guard as a tree of torch's C++ guard managers (``torch._C._dynamo.guards``).

The generated Python guard (``_guard.py``) evaluates every entry path and runs every check at
Python speed: its cost grows with the number of modules, parameters and values the record read.
The same checks can run in C++: TorchDynamo's guard engine evaluates a tree of *managers* (one
per entry path: ``getattr``, ``getitem``, a module's globals...) holding *leaf guards* (type,
identity, equality, length, dict membership, tensor metadata) without running Python per check.
This module builds that tree from a record's plan. Each requirement becomes the leaf guard that
checks the same thing; a requirement with no leaf guard of its own (a set's contents, an exact
float token, an iterator's length, a function's code) becomes a lambda guard running the very
expression the Python guard runs. Aliases are the engine's object-aliasing guards.

What stays in Python (``generate_guard(..., tree=...)``): grad mode and the ambient state, the
storage offsets of the tensors checked in C++, reading the graph's inputs, their distinctness
and the relations between dynamic sizes. The Python guard remains the readable form
(``MAGPY_LOGS=guards``); the runtime swaps the tree in once a record has served
``MAGPY_GUARD_TREE`` calls (building it imports TorchDynamo's guard module, which takes seconds,
once per process). Off by default: without skipping subtrees whose dicts did not change (what
makes TorchDynamo's trees fast), walking every manager on every call is not faster than the
Python guard.
"""

from __future__ import annotations

import builtins
import types
from collections.abc import Callable
from typing import Any, cast

import torch
from torch._C._dynamo.guards import RootGuardManager, install_object_aliasing_guard

from magpy_refgraph import (
    Access,
    AccessKind,
    GuardKind,
    GuardReq,
    InternalError,
    IterLen,
    ModuleCall,
    ModuleNoHooks,
    NotInInstanceDict,
    Path,
    Plan,
    iter_remaining,
)

from ._generated import NameAllocator
from ._guard import ROOT_LOCALS, check_expr
from ._tensorcheck import batchable, example

__all__ = ["GuardTree", "build_tree"]

_ATOMS = (int, str, bytes, bool)


def _plain(value: Any) -> bool:
    """A value whose type and ``==`` together tell it exactly (a float other than a zero or
    a NaN, whose signs and bits ``==`` does not see)."""
    kind = type(value)
    return kind in _ATOMS or (kind is float and value == value and value != 0.0)


class GuardTree:
    """The C++ guard of one plan: ``check((fn, args, kwargs)) -> bool``, and the tensors whose
    storage offset the Python part still checks (``offsets``: (path, offset))."""

    def __init__(
        self, check: Callable[[Any], bool], offsets: list[tuple[Path, int]], keep: list[Any]
    ) -> None:
        self.check = check
        self.offsets = offsets
        self._keep = keep  # (what the tree compares by id lives as long as the tree)


class _Builder:
    def __init__(self, roots: str) -> None:
        from torch._dynamo.guards import GuardManagerType  # (imports TorchDynamo: seconds)

        self.roots = roots
        self.kind = GuardManagerType.GUARD_MANAGER
        self.root = RootGuardManager()
        self.managers: dict[Path, Any] = {}
        self.scopes: dict[int, Any] = {}
        self.keep: list[Any] = []  # objects whose ids the tree compares
        self.offsets: list[tuple[Path, int]] = []
        self.types: dict[Path, type] = {}  # each path's guarded type, where it has one

    # ------------------------------------------------------------------ managers
    def manager(self, path: Path) -> Any:
        found = self.managers.get(path)
        if found is None:
            parent = path.parent
            if parent is None:
                found = self._root(path.root, str(path))
            else:
                found = self._step(self.manager(parent), path.last, str(path))
            self.managers[path] = found
        return found

    def _scope(self, scope: dict[str, Any], source: str) -> Any:
        found = self.scopes.get(id(scope))
        if found is None:
            self.keep.append(scope)
            found = self.root.globals_dict_manager(scope, source, None, self.kind)
            self.scopes[id(scope)] = found
        return found

    def _root(self, access: Access, source: str) -> Any:
        kind, key = access.kind, access.key
        if kind is AccessKind.LOCAL and self.roots == "frame":
            # a site's guard gets (L, S): the frame's locals and the values on its stack
            name = str(key)
            if name.startswith("$s"):
                stack = self.root.tuple_getitem_manager(1, "S", None, self.kind)
                return stack.getitem_manager(int(name[2:]), source, None, self.kind)
            local = self.root.tuple_getitem_manager(0, "L", None, self.kind)
            return local.getitem_manager(name, source, None, self.kind)
        if kind is AccessKind.LOCAL and key in ROOT_LOCALS:
            return self.root.tuple_getitem_manager(ROOT_LOCALS.index(key), source, None, self.kind)
        if kind is AccessKind.GLOBAL and isinstance(access.scope, dict):
            scope = self._scope(access.scope, "globals")
            return scope.dict_getitem_manager(key, source, None, self.kind)
        if kind is AccessKind.BUILTIN:
            scope = self._scope(builtins.__dict__, "builtins")
            return scope.dict_getitem_manager(key, source, None, self.kind)
        if kind is AccessKind.CELL:
            fn = cast(types.FunctionType, access.scope)
            cell = fn.__closure__[fn.__code__.co_freevars.index(key)]  # type: ignore[index]
            self.keep.append(cell)
            read = lambda _: cell.cell_contents  # noqa: E731
            return self.root.lambda_manager(read, source, None, self.kind)
        if kind is AccessKind.CONST:
            box = {"value": key}  # (a dict the tree reads the constant from, in C++)
            return self._scope(box, "const").dict_getitem_manager("value", source, None, self.kind)
        raise InternalError(f"no guard-tree root for {access!r}")

    def _step(self, parent: Any, access: Access, source: str) -> Any:
        key = access.key
        if access.kind is AccessKind.ATTR:
            return parent.getattr_manager(key, source, None, self.kind)
        if access.kind is AccessKind.OBJATTR:  # (PyObject_GenericGetAttr)
            return parent.generic_getattr_manager(key, source, None, self.kind)
        if access.kind is AccessKind.ITEM:
            return parent.getitem_manager(key, source, None, self.kind)
        if access.kind is AccessKind.DICTITEM:  # (PyDict_GetItem: the stored entry)
            return parent.dict_getitem_manager(key, source, None, self.kind)
        if access.kind is AccessKind.ITER:
            read = lambda it, k=key: iter_remaining(it)[k]  # noqa: E731
            return parent.lambda_manager(read, source, None, self.kind)
        if access.kind is AccessKind.JOINED:
            fn, dim = cast(tuple[Any, int], key)
            join = lambda c, f=fn, d=dim: f(c, d)  # noqa: E731
            return parent.lambda_manager(join, source, None, self.kind)
        raise InternalError(f"no guard-tree step for {access!r}")

    # ------------------------------------------------------------------ leaf guards
    def add(self, req: GuardReq) -> None:
        mgr, kind, payload = self.manager(req.path), req.kind, req.payload
        text = [f"{req.path}: {kind.name}"]
        if kind is GuardKind.ID:
            self.keep.append(payload)
            mgr.add_id_match_guard(id(payload), text, None)
        elif kind is GuardKind.TYPE:
            self.keep.append(payload)
            mgr.add_type_match_guard(id(payload), text, None)
        elif kind is GuardKind.NONE:
            mgr.add_none_match_guard(text, None)
        elif kind is GuardKind.NOT_NONE:
            mgr.add_not_none_guard(text, None)
        elif (kind is GuardKind.VALUE and self._value(mgr, payload, text)) or (
            kind is GuardKind.LEN and self._length(req.path, mgr, int(cast(int, payload)), text)
        ):
            pass
        elif kind is GuardKind.KEYS and payload == () and self.types.get(req.path) is dict:
            mgr.add_dict_length_check_guard(0, text, None)
        elif kind is GuardKind.NOT_HASATTR:
            mgr.add_no_hasattr_guard(payload, text, None)
        elif kind is GuardKind.TENSOR_META and batchable(cast(tuple[Any, ...], payload)):
            self._tensor(req.path, mgr, cast(tuple[Any, ...], payload), text)
        elif kind is GuardKind.CUSTOM and self._custom(mgr, payload, text):
            pass
        else:
            self._lambda(mgr, req, text)

    def _length(self, path: Path, mgr: Any, n: int, text: list[str]) -> bool:
        kind = self.types.get(path)  # (the engine has one length check for dicts, one for
        if kind is dict:  # sequences; other containers keep Python's len())
            mgr.add_dict_length_check_guard(n, text, None)
            return True
        if kind is list or kind is tuple:
            mgr.add_length_check_guard(n, text, None)
            return True
        return False

    def _value(self, mgr: Any, value: Any, text: list[str]) -> bool:
        if value is None or value is True or value is False or value is Ellipsis:
            mgr.add_id_match_guard(id(value), text, None)
            return True
        if _plain(value):
            mgr.add_type_match_guard(id(type(value)), text, None)
            mgr.add_equals_match_guard(value, text, None)
            return True
        if type(value) is tuple and all(_plain(x) or x is None for x in value):
            # ``==`` on the tuple, and each item's type: (1, 2) is not (1.0, 2) or (True, 2)
            mgr.add_type_match_guard(id(tuple), text, None)
            mgr.add_equals_match_guard(value, text, None)
            for i, x in enumerate(value):
                item = mgr.tuple_getitem_manager(i, f"[{i}]", None, self.kind)
                item.add_type_match_guard(id(type(x)), text, None)
            return True
        return False

    def _tensor(self, path: Path, mgr: Any, meta: tuple[Any, ...], text: list[str]) -> None:
        cls, _dtype, _device, shape, stride = meta[:5]
        with torch.inference_mode(False), torch.no_grad():
            t = example(meta)
        self.keep.append(t)
        keys = torch._C._dispatch_keys(t)
        mgr.add_tensor_match_guard(t, list(shape), list(stride), str(path), text, None, cls, keys)
        if len(meta) > 6 and meta[6][0] is not None:
            self.offsets.append((path, int(meta[6][0])))

    def _custom(self, mgr: Any, payload: Any, text: list[str]) -> bool:
        kind = type(payload)
        if kind is NotInInstanceDict:
            mgr.getattr_manager("__dict__", "__dict__", None, self.kind).add_dict_contains_guard(
                False, payload.name, text, None
            )
            return True
        if kind is ModuleNoHooks:
            for name in ("_forward_hooks", "_forward_pre_hooks"):
                self._empty(mgr, name, text)
            return True
        if kind is ModuleCall:
            for name in () if payload.grad_off else ("_backward_hooks", "_backward_pre_hooks"):
                self._empty(mgr, name, text)
            if not payload.own_forward:
                own = mgr.getattr_manager("__dict__", "__dict__", None, self.kind)
                own.add_dict_contains_guard(False, "forward", text, None)
            return True
        return False

    def _empty(self, mgr: Any, name: str, text: list[str]) -> None:
        hooks = mgr.getattr_manager(name, name, None, self.kind)
        hooks.add_dict_length_check_guard(0, text, None)

    def _lambda(self, mgr: Any, req: GuardReq, text: list[str]) -> None:
        """The Python guard's own expression for ``req``, run by the tree."""
        names = NameAllocator()
        subject = "v"
        if req.kind is GuardKind.CUSTOM and type(req.payload) is IterLen:
            subject = f"{names.const(iter_remaining)}(v)"  # (its check reads what is left)
        expr = check_expr(req, subject, names.const)
        fn = eval(f"lambda v: bool({expr})", dict(names.consts))
        mgr.add_lambda_guard(fn, text, None)


def build_tree(plan: Plan, roots: str = "call") -> GuardTree:
    """The C++ guard tree of ``plan``: checks ``(fn, args, kwargs)`` of a whole call
    (``roots="call"``) or ``(L, S)`` of a site (``"frame"``: its locals, its stack values)."""
    b = _Builder(roots)
    for req in plan.guards:
        if req.kind is GuardKind.TYPE:
            b.types[req.path] = cast(type, req.payload)
    for req in plan.guards:
        b.add(req)
    for first, other in plan.aliases:
        text = [f"{first} is {other}"]
        install_object_aliasing_guard(b.manager(first), b.manager(other), text, None)
    return GuardTree(b.root.check, b.offsets, b.keep)
