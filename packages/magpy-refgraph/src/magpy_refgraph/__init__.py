"""MagPy's RefGraph: shadow nodes, versioned reference edges, guard and mock sets.

The lowest layer of MagPy; pure Python, never imports torch. The public surface is exactly
``__all__``; implementation lives in the private ``_*.py`` modules. The contract is written
down in ``docs/refgraph-api.md``.
"""

from ._access import (
    Access,
    AccessKind,
    Attr,
    Builtin,
    Cell,
    Const,
    DictItem,
    Global,
    Item,
    IterPos,
    Joined,
    Length,
    Local,
    ObjAttr,
    Path,
)
from ._algorithms import (
    MockSet,
    aliases,
    entry_paths,
    guard_requirements,
    guard_set,
    mock_set,
    node_aliases,
    primary_path,
)
from ._custom import (
    CustomPayload,
    IterLen,
    ModuleCall,
    ModuleNoHooks,
    NoPlainAttr,
    NotInInstanceDict,
    Outcome,
    SetItems,
    SetOrder,
    plain_attr_absent,
)
from ._errors import (
    BackendError,
    GuardFailure,
    InternalError,
    MagPyError,
    NotCompiledError,
    SpeculationMiss,
    StateNotReady,
    UnknownOptionError,
    Unsupported,
)
from ._graph import Edge, NodeKind, RefGraph, ShadowNode, ShadowVersion
from ._guards import (
    GuardKind,
    GuardReq,
    GuardSet,
    exact_token,
    immutable_value,
    set_contents,
    set_order,
)
from ._inspect import dump, to_dot
from ._render import (
    RenderContext,
    SimpleRenderContext,
    iter_remaining,
    literal_expr,
    render_path,
    render_step,
)

__version__ = "0.1.0"

__all__ = [
    "Access",
    "AccessKind",
    "Attr",
    "BackendError",
    "Builtin",
    "Cell",
    "Const",
    "CustomPayload",
    "DictItem",
    "Edge",
    "Global",
    "GuardFailure",
    "GuardKind",
    "GuardReq",
    "GuardSet",
    "InternalError",
    "Item",
    "IterLen",
    "IterPos",
    "Joined",
    "Length",
    "Local",
    "MagPyError",
    "MockSet",
    "ModuleCall",
    "ModuleNoHooks",
    "NoPlainAttr",
    "NodeKind",
    "NotCompiledError",
    "NotInInstanceDict",
    "ObjAttr",
    "Outcome",
    "Path",
    "RefGraph",
    "RenderContext",
    "SetItems",
    "SetOrder",
    "ShadowNode",
    "ShadowVersion",
    "SimpleRenderContext",
    "SpeculationMiss",
    "StateNotReady",
    "UnknownOptionError",
    "Unsupported",
    "aliases",
    "dump",
    "entry_paths",
    "exact_token",
    "guard_requirements",
    "guard_set",
    "immutable_value",
    "iter_remaining",
    "literal_expr",
    "mock_set",
    "node_aliases",
    "plain_attr_absent",
    "primary_path",
    "render_path",
    "render_step",
    "set_contents",
    "set_order",
    "to_dot",
]

from ._plan import *  # noqa: F403  (plan data model, see _plan.py)
from ._plan import __all__ as _plan_all

__all__ += _plan_all
