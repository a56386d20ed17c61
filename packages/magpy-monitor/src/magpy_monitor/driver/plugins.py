"""The one place that imports the modules which fill the registry, in layer order.

Each layer above ``core`` registers its opcode handlers, call rules and protocol entries into
``core.registry`` when it is imported. Importing this module imports all of them, lowest layer
first, so a rule's place in an ordered table never depends on which module happened to be
imported first elsewhere. ``driver.tracer`` imports it before the first monitored run.
"""

from __future__ import annotations

from magpy_refgraph import InternalError

from ..bytecode import (
    attributes as attribute_ops,
)
from ..bytecode import (
    build,
    calls,
    closures,
    control,
    deletes,
    exceptions,
    imports,
    iteration,
    match,
    operators,
    subscripts,
    variables,
)
from ..core import attributes, dispatch, registry
from ..libs.numpy import arrayindex, ndarrays, randomstate
from ..libs.numpy import rules as numpy_rules
from ..libs.stdlib import draws, locks, pyenv, sleep, warn, weakrefs
from ..libs.torch import (
    autograd,
    checkpoint,
    collectives,
    dtensor,
    functions,
    globalstate,
    hooks,
    hops,
    modattrs,
    modctor,
    optim,
    regions,
    seeding,
    tensorattrs,
    tensorctors,
    tensorrows,
)
from ..libs.torch import (
    rules as torch_rules,
)
from ..libs.transformers import outputs as hf_outputs
from ..pyobj import (
    attrcalls,
    attrhooks,
    attrreads,
    builtins,
    classes,
    collections,
    compare,
    containers,
    contexts,
    copying,
    descriptors,
    highorder,
    instances,
    iterators,
    keyed,
    methods,
    objects,
    replayed,
    sets,
    setstate,
    special,
    typechecks,
)
from ..pyobj import (
    rules as pyobj_rules,
)

__all__ = ["LOADED"]

# lowest layer first: bytecode, then the object model, then libraries
LOADED = (
    # core
    dispatch,
    attributes,
    # bytecode
    control, variables, imports, attribute_ops, subscripts, operators, build, calls,
    closures, deletes, exceptions, iteration, match,
    # pyobj
    builtins, methods, containers, collections, compare, setstate, sets, objects, instances,
    attrreads, replayed, attrhooks, attrcalls, classes, descriptors,
    special, highorder, keyed, typechecks, iterators, contexts, copying,
    pyobj_rules,
    # libs: stdlib < numpy < torch < transformers
    warn, pyenv, sleep, weakrefs, locks, draws, ndarrays, numpy_rules, randomstate, arrayindex,
    hooks, modattrs, modctor, tensorctors, autograd, tensorattrs, tensorrows, globalstate,
    checkpoint, optim, regions, hops, functions, dtensor, collectives, seeding,
    torch_rules,
    hf_outputs,
)  # fmt: skip

for _rules in (registry.CALL_RULES, registry.ATTR_RULES):
    if _rules.missing():  # pragma: no cover - a rule declared in the order but never registered
        raise InternalError(f"{_rules.name} declared but not registered: {_rules.missing()}")
