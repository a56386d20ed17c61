"""Every table the monitor dispatches through, empty here, filled by the layers above.

``core`` and ``bytecode`` must not import the object model (``pyobj``) or the library knowledge
(``libs``), yet an instruction such as ``x in s`` or ``for v in a`` needs what those layers know
about sets or arrays. The inversion: the lower layer looks the behaviour up here, the upper layer
registers it when it is imported (``driver.plugins`` imports every registering module once).

Three shapes of entry:

* **tables** keyed by identity or by ``(owner, name)``: ``BUILTIN_HANDLERS``,
  ``METHOD_HANDLERS``, ``TENSOR_METHOD_HANDLERS``, ``OPCODE_HANDLERS``, ``FUNCTION_APPLY_MODELS``;
* **hooks**: one function a lower layer calls and exactly one upper layer provides
  (``Hook``), e.g. how the contents of a set are observed;
* **ordered rules** (``RuleList``): the cases of one protocol, each with a name, tried in the
  order declared here (``CALL_RULE_ORDER``), whichever module registers them and whenever it is
  imported. The order is data, visible in one place and tested by itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from magpy_refgraph import InternalError

if TYPE_CHECKING:
    from .capture import Capture
    from .frame import FrameMonitor, Inst
    from .values import Val

__all__ = [
    "ARRAY_INDEX",
    "ARRAY_ITEMS",
    "ARRAY_OF_TENSOR",
    "ARRAY_OP",
    "ATTR_RULES",
    "ATTR_RULE_ORDER",
    "BEFORE_WITH",
    "BINARY_OP_MODELS",
    "BUILD_SET",
    "BUILTIN_HANDLERS",
    "BUILT_OBJECT",
    "BUILT_OBJECT_TRUTH",
    "CALL_RULES",
    "CALL_RULE_ORDER",
    "CALL_WITH_LAZY_STAR",
    "CHANGE_REPLAYED",
    "CHECK_ROW_SOURCE",
    "COMPARE_MODELS",
    "CONTAINS_MODELS",
    "DELETE_ATTR_FOLLOWED",
    "EXTERNAL_ATTR_FOLLOWED",
    "FILLING_CONSTRUCTIONS",
    "FOLLOW",
    "FUNCTION_APPLY_MODELS",
    "GENERATOR_CLASSES",
    "GRAPH_CONSTANT",
    "GUARD_LAYOUT",
    "IMMUTABLE_CLASSES",
    "INVOLVES_ARRAY",
    "IS_PYOBJ",
    "ITER_ITEMS_MODELS",
    "LOAD_ATTR_FOLLOWED",
    "MAP_ROWS",
    "MATERIALIZE",
    "METHOD_HANDLERS",
    "MISSING_ITEM",
    "MODELLED_MISSING",
    "NATIVE_WARNING_REPLAYED",
    "NOTE_CATCH_WARNINGS",
    "NUMPY_ERROR_STATE",
    "OBSERVE_SET",
    "OPCODE_HANDLERS",
    "OUTSIDE_ARRAY",
    "PARTIAL_CALL",
    "PLAIN_STORE",
    "PUT_ITEM",
    "PYTHON_DUNDER",
    "REFERENT",
    "SET_ADD",
    "SET_UPDATE",
    "STORE_ARRAY_ITEM",
    "STORE_ATTR_FOLLOWED",
    "STORE_ITEM_FOLLOWED",
    "STORE_TENSOR_ATTR",
    "TENSOR_METHOD_HANDLERS",
    "TENSOR_ROWS",
    "UNPACK",
    "UNPACK_EX_ROWS",
    "UNPACK_LAZY",
    "VALUE_OBSERVERS",
    "ZIP_ROWS",
    "BuiltinHandler",
    "Hook",
    "OpcodeHandler",
    "Rule",
    "RuleList",
    "opcode",
    "register_builtin",
    "register_methods",
    "register_types",
]

F = TypeVar("F", bound=Callable[..., Any])

# ---------------------------------------------------------------------------------- tables
OpcodeHandler = Callable[["FrameMonitor", "Inst"], None]
BuiltinHandler = Callable[["FrameMonitor", "Inst", "list[Val]", "dict[str, Val]"], None]

#: opcode name -> the handler that models it (filled by ``bytecode``)
OPCODE_HANDLERS: dict[str, OpcodeHandler] = {}
#: ``id(fn)`` -> ``(fn, handler)`` for native callables modelled by identity
BUILTIN_HANDLERS: dict[int, tuple[Any, BuiltinHandler]] = {}
#: ``(owner class, method name)`` -> handler, for native methods (``list.append``)
METHOD_HANDLERS: dict[tuple[Any, Any], BuiltinHandler] = {}
#: tensor method name -> handler, for tensor methods that are not one graph node (``x.new``)
TENSOR_METHOD_HANDLERS: dict[str, BuiltinHandler] = {}
#: ``torch.autograd.Function`` subclass -> model of its ``apply`` (``CheckpointFunction``)
FUNCTION_APPLY_MODELS: dict[type, Any] = {}
#: predicates over a replayed construction (``values.Construction``): true when building the
#: class with those arguments, and making those changes, does nothing but fill the new object's
#: ``__dict__`` and items (a library's output class: ``libs.transformers``), so the mock may
#: build the object from its final state instead of calling the class again
FILLING_CONSTRUCTIONS: list[Callable[[Any], bool]] = []
#: type -> ``observe(cap, val)`` that guards an immutable object of that type by its value (a
#: DTensor ``Placement``: ``libs.torch.dtensor``), for models that compare such objects
VALUE_OBSERVERS: dict[type, Callable[..., None]] = {}


def opcode(*names: str) -> Callable[[OpcodeHandler], OpcodeHandler]:
    """Register the decorated function as the handler of the opcodes ``names``."""

    def deco(fn: OpcodeHandler) -> OpcodeHandler:
        for n in names:
            OPCODE_HANDLERS[n] = fn
        return fn

    return deco


def register_builtin(*fns: Any) -> Callable[[BuiltinHandler], BuiltinHandler]:
    """Use the decorated handler for calls of ``fns`` (by identity)."""

    def deco(h: BuiltinHandler) -> BuiltinHandler:
        for fn in fns:
            BUILTIN_HANDLERS[id(fn)] = (fn, h)
        return h

    return deco


def register_methods(owner: type, *names: str) -> Callable[[BuiltinHandler], BuiltinHandler]:
    """Use the decorated handler for the native methods ``owner.<name>``."""

    def deco(h: BuiltinHandler) -> BuiltinHandler:
        for n in names:
            METHOD_HANDLERS[(owner, n)] = h
        return h

    return deco


# ----------------------------------------------------------------------------------- hooks
class Hook(Generic[F]):
    """One function that a lower layer calls and exactly one higher layer provides.

    ``HOOK.provide`` is used as a decorator by the providing module; calling the hook before
    it is provided (the registering module was never imported) is an ``InternalError``.
    """

    __slots__ = ("fn", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.fn: F | None = None

    def provide(self, fn: F) -> F:
        if self.fn is not None:
            raise InternalError(f"hook {self.name} is provided twice ({self.fn} and {fn})")
        self.fn = fn
        return fn

    @property
    def impl(self) -> F:
        fn = self.fn
        if fn is None:
            raise InternalError(f"hook {self.name} was never provided (plugins not imported)")
        return fn

    def __repr__(self) -> str:
        return f"Hook({self.name!r}, {self.fn!r})"


# ----------------------------------------------------------------------------------- rules
class Rule(Generic[F]):
    """One case of a protocol: ``applies`` decides, ``handle`` models it."""

    __slots__ = ("applies", "handle", "name")

    def __init__(self, name: str, applies: Callable[..., Any], handle: F) -> None:
        self.name = name
        self.applies = applies
        self.handle = handle

    def __repr__(self) -> str:
        return f"Rule({self.name!r})"


class RuleList(Generic[F]):
    """The cases of one protocol in a declared order.

    ``order`` names every rule, first tried first. Layers register rules by name (a name not
    declared is refused, and so is a second rule of one name); iteration yields the registered
    rules in the declared order, whichever module registered them first. ``missing()`` names
    the declared rules no layer registered (a test checks it is empty once plugins load).
    """

    __slots__ = ("_by_name", "_ordered", "name", "order")

    def __init__(self, name: str, order: tuple[str, ...]) -> None:
        if len(set(order)) != len(order):
            raise InternalError(f"{name}: a rule is declared twice in {order}")
        self.name = name
        self.order = order
        self._by_name: dict[str, Rule[F]] = {}
        self._ordered: tuple[Rule[F], ...] = ()

    def register(self, name: str, applies: Callable[..., Any]) -> Callable[[F], F]:
        """Decorator: the decorated function handles the calls ``applies`` accepts."""
        if name not in self.order:
            raise InternalError(f"{self.name}: rule {name!r} is not declared in its order")
        if name in self._by_name:
            raise InternalError(f"{self.name}: rule {name!r} is registered twice")

        def deco(handle: F) -> F:
            self._by_name[name] = Rule(name, applies, handle)
            self._ordered = tuple(self._by_name[n] for n in self.order if n in self._by_name)
            return handle

        return deco

    def missing(self) -> list[str]:
        return [n for n in self.order if n not in self._by_name]

    def __iter__(self) -> Iterator[Rule[F]]:
        return iter(self._ordered)

    def __len__(self) -> int:
        return len(self._ordered)


# How a CALL is modelled (``core.dispatch.dispatch_call``): the first rule whose
# ``applies(call)`` is true handles it; a handler that returns a ``Call`` lets the rules after it
# go on with that call (a bound method unbound, ``self`` made explicit). Where cases overlap the
# order decides; docs/monitor.md ("call rules") gives the reason for each place. Registered by:
# core (core/dispatch.py), pyobj (pyobj/rules.py), libs (libs/torch/rules.py).
CALL_RULE_ORDER: tuple[str, ...] = (
    "grad-mode exit",  # libs/torch: __exit__ of no_grad() & co, before any other __exit__
    "context exit",  # pyobj: __exit__ of a context manager the monitor models
    "grad-mode class",  # libs/torch: torch.no_grad() & co (classes: before the class rules)
    "exception class",  # core: ValueError(...) is pure
    "module class",  # libs/torch: nn.ReLU(...) built inside forward
    "replayable class",  # pyobj: a dataclass built by the run
    "namedtuple class",  # pyobj
    "namedtuple _replace",  # pyobj
    "tuple __new__",  # pyobj: a tuple subclass's Python __new__ (PackedSequence)
    "random draw",  # libs/stdlib: a draw from a random generator, made again by the mock
    "builtin",  # core: BUILTIN_HANDLERS, by identity
    "DTensor placement class",  # libs/torch: Shard(d) of guarded arguments is a constant
    "metaclass __call__",  # pyobj: a metaclass with a Python __call__
    "plain class",  # pyobj: instances of plain Python classes and context classes
    "module with own __call__",  # libs/torch: an nn.Module subclass overriding __call__
    "module call",  # libs/torch: module(x), hooks included
    "modelled Function.apply, bound",  # libs/torch: unbinds MyFn.apply, then goes on
    "modelled Function.apply",  # libs/torch: FUNCTION_APPLY_MODELS
    "autograd backward",  # libs/torch: loss.backward(), torch.autograd.backward
    "autograd grad",  # libs/torch: torch.autograd.grad
    "DTensor placement query",  # libs/torch: Shard(0).is_shard(): a constant of its value
    "bound method",  # core: annotated as a whole, else unbound and dispatched again
    "Function.apply",  # libs/torch: any other autograd Function: no_grad, its forward; else a node
    "tensor method self",  # core: a bound native tensor method gets its self, then goes on
    "tensor method handler",  # core: TENSOR_METHOD_HANDLERS (x.new, x.type)
    "graph operator",  # core: AS_OP, one graph node
    "shape read",  # core: META (x.size(), x.dim())
    "pure",  # core: PURE, a constant guarded by its inputs
    "tensor value read",  # core: t.item() and the like, speculated
    "tensor to ndarray",  # core: t.numpy(), tensor math while only numpy arithmetic reads it
    "dynamic",  # core: VALUE_READ / EFFECT stop the capture
    "opaque forward",  # pyobj: super().forward(x) of an RNN, one node
    "weak reference",  # libs/stdlib: ref() of an object the run knows
    "lru_cache wrapper",  # libs/stdlib: a cached function over plain values is a constant
    "torch-disabled wrapper",  # libs/torch: torch._disable_dynamo(fn): followed through
    "compile region placeholder",  # libs/torch: nested_compile_region's call, nodes marked
    "torch graph_break hint",  # libs/torch: torch._dynamo.graph_break() in torch's own code
    "library call on a module being built",  # libs/torch: super().__init__() in a followed one
    "python function",  # core: followed into its frame
    "forwarding callable",  # libs/torch: functools.partial, scripted functions
    "compiled callable",  # core: another magpy.compile'd callable is a break
    "python __call__",  # core: an instance whose class has a Python __call__
    "native method",  # core: METHOD_HANDLERS, else unsupported (always applies: last)
)
CALL_RULES: RuleList[Any] = RuleList("call rules", CALL_RULE_ORDER)

# ``base.name`` (LOAD_ATTR / LOAD_METHOD and getattr) of a value the monitor knows: the first
# rule that applies gives the attribute's shadow (``core.dispatch.load_attr``).
ATTR_RULE_ORDER: tuple[str, ...] = (
    "tensor grad",  # libs/torch: p.grad of a tensor from outside, or as the run set it
    "tensor attribute",  # libs/torch: x.shape, x.T, x.volatile
    "warnings state in a catch_warnings block",  # pyobj: warnings.filters there is a break
    "library module",  # core: an attribute of torch, math, ... guarded where it lives
    "known attribute",  # core: an attribute the run set or read before
    "function code",  # core: f.__code__ is the program's own code, never an instrumented one
    "super()",  # pyobj: super().attr
    "array made by the run",  # libs/numpy: a.T, a.shape (before the constant rule)
    "class attribute of a built module",  # libs/torch: self.k of a module built in forward
    "constant",  # core: an attribute of a constant
    "module dict attribute",  # libs/torch: self.conv read from self._modules['conv']
    "from outside",  # core: guarded through the base's access path
    "of a scalar expression",  # core: replayed with getattr
    "namedtuple field",  # core
    "bound method of a built object",  # core: kwds.pop, qt._make
    "known object",  # core: the attribute is an object the run knows
    "structseq value",  # core: torch.finfo(...).eps
    "replayed object",  # pyobj: a dataclass/namedtuple made by the run
    "class attribute of an instance",  # pyobj
    "instance __dict__",  # pyobj
    "made class",  # pyobj: an attribute of a class the run built
)
ATTR_RULES: RuleList[Any] = RuleList("attribute rules", ATTR_RULE_ORDER)


# ------------------------------------------------------------- protocol tables of the layers
# Each layer's section holds the hooks and tables that lower layers call and that layer fills.

# --- provided by bytecode (called by core) -------------------------------------------------
#: the values of iterable ``v``, known without running it, ``v`` left exhausted; called by
#: ``core.operators`` (``a + b`` of sequences); provided by ``bytecode.iteration.unpack``
UNPACK: Hook[Callable[..., Any]] = Hook("unpack")

# --- provided by pyobj (called by core and bytecode) ---------------------------------------
#: ``(val) -> bool``: ``val`` is an object built by the run that the mock rebuilds (a dataclass,
#: a namedtuple, a plain instance). Called by ``bytecode.subscripts``; provided by pyobj/rules.
BUILT_OBJECT: Hook[Callable[[Val], bool]] = Hook("built object")
#: ``(val) -> bool``: ``bool(val)`` of an object built in the run follows from its shadow (no
#: Python ``__bool__``/``__len__``). Called by ``core.calls.truthiness``; provided by pyobj/rules.
BUILT_OBJECT_TRUTH: Hook[Callable[[Val], bool]] = Hook("truth of a built object")
#: ``(m, inst, container, key)``: a key missing from a mapping the run built (``defaultdict``,
#: ``Counter``; else ``KeyError``). Called by ``bytecode.subscripts``; provided by pyobj/rules.
MISSING_ITEM: Hook[Callable[[FrameMonitor, Inst, Val, Val], None]] = Hook("missing item")
#: ``(mapping, key) -> bool``: ``MISSING_ITEM`` models ``mapping[key]`` of a missing key (then
#: a mapping from outside gets its shadow items first). Provided by pyobj/rules.
MODELLED_MISSING: Hook[Callable[[Any, Any], bool]] = Hook("modelled missing item")


def register_types(table: dict[type, F], *types: type) -> Callable[[F], F]:
    """Decorator: the decorated function models the objects of exact types ``types`` in
    ``table`` (one of the type-keyed protocol tables below)."""

    def deco(fn: F) -> F:
        for t in types:
            table[t] = fn
        return fn

    return deco


# type-keyed protocols, looked up by the operands' exact types (pyobj.sets: set, frozenset)
#: ``a | b``, ``a & b``, ``a - b``, ``a ^ b`` (and in-place forms) when both operands' types are
#: keys: ``(m, inst, a, b, symbol)``; called by ``bytecode.operators`` BINARY_OP
BINARY_OP_MODELS: dict[type, Callable[..., None]] = {}
#: COMPARE_OP when both operands' types are keys: ``(m, inst, a, b, symbol)``; called by
#: ``bytecode.operators``
COMPARE_MODELS: dict[type, Callable[..., None]] = {}
#: ``item in container`` by the container's type: ``(m, inst, item, container)``; called by
#: ``bytecode.operators`` CONTAINS_OP
CONTAINS_MODELS: dict[type, Callable[..., None]] = {}
#: the values iterating an object of the type gives: ``(m, v) -> list[Val]``; called by
#: ``bytecode.iteration.iter_items``
ITER_ITEMS_MODELS: dict[type, Callable[..., Any]] = {}

# instructions building sets (bytecode.build; provided by pyobj.sets)
#: BUILD_SET ``(m, inst, parts)``: ``build_set``
BUILD_SET: Hook[Callable[..., None]] = Hook("build_set")
#: SET_ADD ``(m, inst, target, v)``: ``set_add_inst``
SET_ADD: Hook[Callable[..., None]] = Hook("set_add")
#: SET_UPDATE ``(m, inst, target, iterable)``: ``set_update_inst``
SET_UPDATE: Hook[Callable[..., None]] = Hook("set_update")
#: ``observe_set(cap, v)``: the program depends on the whole of set ``v``, its iteration order
#: included; called by ``core.capture.Capture.observe``; provided by ``pyobj.sets.observe_set``
OBSERVE_SET: Hook[Callable[..., None]] = Hook("observe_set")

# objects built during the run whose class runs Python (provided by pyobj.instances)
#: ``is_pyobj(v)``: ``v`` is an instance of a plain class built during the run; called by
#: ``bytecode.attributes`` and ``bytecode.subscripts`` before the ``*_FOLLOWED`` hooks
IS_PYOBJ: Hook[Callable[..., bool]] = Hook("is_pyobj")
#: LOAD_ATTR/LOAD_METHOD (``method=True``) of an object built in the run (an instance of a plain
#: class, or one the mock rebuilds by calling its class) that runs Python: a getter, a Python
#: ``__getattr__``/``__getattribute__`` (followed: True); ``bytecode.attributes``
LOAD_ATTR_FOLLOWED: Hook[Callable[..., bool]] = Hook("load_attr_followed")
#: LOAD_ATTR/LOAD_METHOD of an object from outside whose class runs Python for the name
#: (followed: True); ``bytecode.attributes``
EXTERNAL_ATTR_FOLLOWED: Hook[Callable[..., bool]] = Hook("external_attr_followed")
#: STORE_ATTR of such an object that runs a ``__setattr__``/setter (followed: True);
#: ``bytecode.attributes``
STORE_ATTR_FOLLOWED: Hook[Callable[..., bool]] = Hook("store_attr_followed")
#: DELETE_ATTR (and ``delattr``) of such an object that runs a property's deleter (followed:
#: True); ``bytecode.attributes``, ``pyobj.attrcalls``
DELETE_ATTR_FOLLOWED: Hook[Callable[..., bool]] = Hook("delete_attr_followed")
#: ``plain_store(cls, name)``: ``setattr`` on a ``cls`` only writes ``__dict__``;
#: ``bytecode.attributes.store_attr``
PLAIN_STORE: Hook[Callable[..., bool]] = Hook("plain_store")
#: STORE_SUBSCR of such an object: its Python ``__setitem__`` or its own items (True);
#: ``bytecode.subscripts``
STORE_ITEM_FOLLOWED: Hook[Callable[..., bool]] = Hook("store_item_followed")
#: ``change(m, inst, base, kind, key, value, pushes=False)``: a store or deletion (``kind``:
#: "attr", "item", "delattr") on an object the mock rebuilds by calling its class again (a
#: ``Construction``), made again by the mock; ``bytecode.attributes``, ``bytecode.subscripts``;
#: provided by pyobj.replayed
CHANGE_REPLAYED: Hook[Callable[..., None]] = Hook("change_replayed")
#: ``python_dunder(obj, name)``: the Python function ``type(obj)`` defines for a special method;
#: ``bytecode.operators`` CONTAINS_OP (``__contains__``)
PYTHON_DUNDER: Hook[Callable[..., Any]] = Hook("python_dunder")
#: ``follow(m, inst, fn, args, n_out, outputs)``: inline a Python function that ``inst`` calls
#: natively; ``bytecode.operators`` CONTAINS_OP
FOLLOW: Hook[Callable[..., None]] = Hook("follow")

# containers (provided by pyobj.collections, pyobj.containers, pyobj.highorder, pyobj.contexts)
#: ``put_item(items, key, value)``: ``d[key] = value`` on shadow items (an equal key keeps its
#: object); ``bytecode.subscripts``, ``bytecode.match``; pyobj.collections
PUT_ITEM: Hook[Callable[..., None]] = Hook("put_item")
#: ``materialize(cap, v, reason)``: an entry list/dict about to change gets shadow items;
#: ``bytecode.operators`` (``lst += x``), ``bytecode.subscripts``; pyobj.containers
MATERIALIZE: Hook[Callable[..., None]] = Hook("materialize")
#: CALL_FUNCTION_EX ``f(*map(g, xs))`` over a lazy map/filter or a generator (modelled: True);
#: ``bytecode.calls``; pyobj.highorder.call_with_lazy_star
CALL_WITH_LAZY_STAR: Hook[Callable[..., bool]] = Hook("call_with_lazy_star")
#: UNPACK_SEQUENCE of a lazy map/filter made in the run (modelled: True);
#: ``bytecode.iteration.unpack_pending``; pyobj.highorder.unpack_lazy
UNPACK_LAZY: Hook[Callable[..., bool]] = Hook("unpack_lazy")
#: BEFORE_WITH of a context manager other than torch's grad modes; ``bytecode.exceptions``;
#: pyobj.contexts.before_with
BEFORE_WITH: Hook[Callable[..., None]] = Hook("before_with")

# --- provided by libs (called by core, bytecode and pyobj) ---------------------------------
#: ``(cap, val) -> Tensor | ndarray | None``: the numpy array inside ``val`` that the run did not
#: make (a constant array whose contents no guard reads). Called by ``core.calls.pure_call``;
#: provided by libs/numpy/rules.
OUTSIDE_ARRAY: Hook[Callable[[Capture, Val], Any]] = Hook("outside array")
# numpy arrays made during the run (provided by libs.numpy.ndarrays)
#: ``involves_array(args, result)``: an operator's operands or result include an array;
#: ``core.operators.scalar_op``, ``bytecode.operators`` CONTAINS_OP, ``bytecode.subscripts``
INVOLVES_ARRAY: Hook[Callable[..., bool]] = Hook("involves_array")
#: ``array_op(m, fn, args, result) -> Val``: an operator over arrays, after it ran;
#: ``core.operators.scalar_op``, ``bytecode.operators`` CONTAINS_OP
ARRAY_OP: Hook[Callable[..., Any]] = Hook("array_op")
#: ``array_of_tensor(m, inst, t, what) -> None``: ``t.numpy()``, an ndarray over tensor ``t``'s
#: values whose uses numpy models as tensor math; called by ``core.dispatch``; provided by
#: libs.numpy.tensorarrays
ARRAY_OF_TENSOR: Hook[Callable[..., None]] = Hook("array_of_tensor")
#: ``store_array_item(m, container, key, value)``: ``a[key] = value``; ``bytecode.subscripts``
STORE_ARRAY_ITEM: Hook[Callable[..., None]] = Hook("store_array_item")
#: ``array_items(m, v)``: the elements of a constant 1-d array (None: ``v`` is no array);
#: ``bytecode.iteration.iter_items``
ARRAY_ITEMS: Hook[Callable[..., Any]] = Hook("array_items")
#: ``check_error_state(m, fn, args, kwargs, result)``: ``fn`` ran natively over plain values;
#: where it was numpy arithmetic that met a floating-point condition, the record holds only
#: under numpy's error state (``np.errstate``); ``core.operators.scalar_op``;
#: libs.numpy.errstate
NUMPY_ERROR_STATE: Hook[Callable[..., None]] = Hook("numpy_error_state")

# torch (provided by libs.torch)
#: ``store_tensor_attr(m, base, name, value)``: ``t.name = value`` on a tensor (``p.data``,
#: ``t.requires_grad``); ``bytecode.attributes.store_attr``; libs.torch.tensorattrs
STORE_TENSOR_ATTR: Hook[Callable[..., None]] = Hook("store_tensor_attr")
#: ``graph_constant(cap, val) -> GraphConstant | None``: a non-tensor argument of a tensor
#: operation that the graph holds as it is (a DTensor's ``DeviceMesh`` or placements, a dict of
#: options the run built), guarded; None: not one. ``core.capture.Capture.to_arg``;
#: libs.torch.dtensor
GRAPH_CONSTANT: Hook[Callable[[Capture, Val], Any]] = Hook("graph_constant")
#: ``array_index(cap, key) -> Val | None``: the key of a tensor subscript with the numpy arrays
#: in it (``x[:, a]``) replaced by the tensors torch makes of them, constants of the graph
#: (guarded); None where no array is in it. ``bytecode.subscripts``; libs.numpy.arrayindex
ARRAY_INDEX: Hook[Callable[[Capture, Val], Any]] = Hook("array_index")
#: ``guard_layout(cap, val)``: entry tensor ``val`` is of a subclass whose layout is part of its
#: metadata (a DTensor's mesh and placements): guard it with the rest of its metadata.
#: ``core.shapes.observe_meta``; libs.torch.dtensor
GUARD_LAYOUT: Hook[Callable[[Capture, Val], None]] = Hook("guard_layout")
#: classes of immutable values beyond ``core.valuetypes``' (DTensor placements): a method read
#: off a constant of one is bound to that constant (``core.calls.method_self``); libs.torch.dtensor
IMMUTABLE_CLASSES: list[type] = []
#: random generators whose draws are modelled whole (``libs.stdlib.draws``): a method read off
#: a guarded constant (``np.random.randint``) is bound to its generator as a constant, which
#: only the draw rule then reads (it replays the draw; nothing else looks into the generator)
GENERATOR_CLASSES: set[type] = set()

# a tensor's rows, as ``Tensor.__iter__`` gives them (``unbind(0)``), where the object model
# iterates (called by pyobj; provided by libs.torch.tensorrows)
#: ``zip_rows(m, inst, pos, kw)``: ``zip(...)`` with a tensor among its arguments;
#: called by ``pyobj.builtins`` (``zip``)
ZIP_ROWS: Hook[Callable[..., None]] = Hook("zip_rows")
#: ``unpack_ex_rows(m, inst, v, before, after)``: UNPACK_EX ``x, *rest = t`` of a tensor;
#: called by ``pyobj.containers``
UNPACK_EX_ROWS: Hook[Callable[..., None]] = Hook("unpack_ex_rows")
#: ``map_rows(m, inst, kind, fn_val, v)``: ``map``/``filter`` over a tensor's rows;
#: called by ``pyobj.highorder``
MAP_ROWS: Hook[Callable[..., None]] = Hook("map_rows")
#: ``check_row_source(m, v)``: refuse a tensor whose rows cannot be found again (checked before
#: an ``itertools`` function pools them); called by ``pyobj.iterators``
CHECK_ROW_SOURCE: Hook[Callable[..., None]] = Hook("check_row_source")
#: ``tensor_rows(m, v, rows) -> Val``: the rows native code made of tensor ``v`` (a tuple), as
#: the outputs of an ``unbind`` in the graph; called by ``pyobj.iterators``
TENSOR_ROWS: Hook[Callable[..., Any]] = Hook("tensor_rows")
#: ``partial_call(m, fn_val, pos, kwargs) -> (func, pos, kwargs)``: the call a
#: ``functools.partial`` makes; called by ``pyobj.highorder.follow_callbacks``; provided by
#: libs.torch.tensorctors (``_partial``)
PARTIAL_CALL: Hook[Callable[..., Any]] = Hook("partial_call")

# the standard library (provided by libs.stdlib)
#: ``referent(v) -> Val | None``: the shadow of the object ``v`` stands for, if ``v`` is a weak
#: proxy made in the run (its attributes are the referent's); called by ``bytecode.attributes``
#: and ``pyobj.attrcalls``; provided by libs.stdlib.weakrefs
REFERENT: Hook[Callable[[Val], Val | None]] = Hook("referent")
#: ``note_catch_warnings(m)``: the run entered ``warnings.catch_warnings()``; called by
#: ``pyobj.contexts``; provided by libs.stdlib.warn
NOTE_CATCH_WARNINGS: Hook[Callable[..., None]] = Hook("note_catch_warnings")
#: ``replay_native_warning(m, prefix)``: the instruction whose outputs are being made issued,
#: natively, the one warning starting with ``prefix`` that it issues on every execution; the
#: mock replays it (a break where the run did not see it); ``bytecode.subscripts``; provided
#: by libs.stdlib.warn
NATIVE_WARNING_REPLAYED: Hook[Callable[..., None]] = Hook("replay_native_warning")
