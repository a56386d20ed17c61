"""The one place that imports the modules which fill the registry, in layer order.

Each layer above ``core`` registers its opcode handlers, call rules and protocol entries into
``core.registry`` when it is imported. Importing this module imports all of them, lowest layer
first, so a rule's place in an ordered table never depends on which module happened to be
imported first elsewhere. ``driver.tracer`` imports it before the first monitored run.
"""

from __future__ import annotations

from ..bytecode import closures, deletes, exceptions, handlers, identity, iteration, match
from ..libs.numpy import ndarrays
from ..libs.stdlib import pyenv, warn
from ..libs.torch import (
    checkpoint,
    globalstate,
    hooks,
    modctor,
    tensorattrs,
    tensorctors,
    tensorrows,
)
from ..pyobj import (
    builtins,
    classes,
    collections,
    containers,
    contexts,
    highorder,
    instances,
    objects,
    sets,
    special,
)

__all__ = ["LOADED"]

# lowest layer first: bytecode, then the object model, then libraries
LOADED = (
    # bytecode
    closures, deletes, exceptions, handlers, identity, iteration, match,
    # pyobj
    builtins, containers, collections, sets, objects, instances, classes, special, highorder,
    contexts,
    # libs: stdlib < numpy < torch
    warn, pyenv, ndarrays,
    hooks, modctor, tensorctors, tensorattrs, tensorrows, globalstate, checkpoint,
)  # fmt: skip
