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
    from .frame import FrameMonitor, Inst
    from .values import Val

__all__ = [
    "BUILTIN_HANDLERS",
    "CALL_RULES",
    "CALL_RULE_ORDER",
    "FUNCTION_APPLY_MODELS",
    "METHOD_HANDLERS",
    "OPCODE_HANDLERS",
    "TENSOR_METHOD_HANDLERS",
    "BuiltinHandler",
    "Hook",
    "OpcodeHandler",
    "Rule",
    "RuleList",
    "opcode",
    "register_builtin",
    "register_methods",
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


# How a CALL is modelled: the first rule whose ``applies(call)`` is true handles it. The order
# matters where cases overlap; the reason for each place is in docs/monitor.md ("call rules").
CALL_RULE_ORDER: tuple[str, ...] = ()
CALL_RULES: RuleList[Any] = RuleList("call rules", CALL_RULE_ORDER)


# ------------------------------------------------------------- protocol tables of the layers
# Each layer's section holds the hooks and tables that lower layers call and that layer fills.

# --- provided by bytecode (called by core) -------------------------------------------------

# --- provided by pyobj (called by core and bytecode) ---------------------------------------

# --- provided by libs (called by core, bytecode and pyobj) ---------------------------------
