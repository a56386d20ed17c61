"""Which operations give a view of their input, read from ATen's schemas.

An ATen schema annotates what its results may alias: ``view(Tensor(a) self, ...) ->
Tensor(a)`` returns (something that may be) the storage of ``self`` without writing it, while
``add_(Tensor(a!) self, ...) -> Tensor(a!)`` writes it and ``add(Tensor self, ...) -> Tensor``
returns a new tensor. An operation is a view here when one of its overloads takes a tensor
``self`` it does not write and returns an alias of it (``Tensor(a)``, or ``Tensor(a)[]`` for
``split``/``chunk``/``unbind``, each item a view).

The rule is "may be a view", never "is always one": it counts the operations that return
``self`` itself or a view when they can and copy otherwise (``reshape``, ``flatten``,
``contiguous``, ``to``, ``cpu``), since their result may share the input's storage. That is the
safe side for both users: the monitor (a view of a copied ``x[t]`` is a copy too, and must not
be written or escape, ``recorder``) and codegen (views do no work worth compiling, ``_fusable``:
counting a copy as free only changes which backend runs a small graph, never a result).

Python spellings reach the schemas by name: a torch function or Tensor method by its
``__name__`` (``torch.transpose``, ``Tensor.view``), basic indexing (``operator.getitem``) as
``select``/``slice``, a property read (``getattr(x, "T")``) by the operator behind it. Two small
tables hold what the schemas cannot say, each entry with its reason: properties with no
operator of their own name, and operations whose schema leaves out an alias they may return.
An operation that hands back its argument itself (``x.float()`` of a float ``x``, ``dropout``
when not training) needs neither: the monitor sees the same object come back.

This is the one definition the monitor and codegen use, and the only module that reads schemas
for views (its test pins the answers for the operations MagPy meets).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

__all__ = ["is_view", "view_name"]

# Python spellings of tensor operations whose ATen operator has another name: properties
# (``x.T``) and indexing (``x[i, 1:]``: ``select``/``slice``; an index that holds a tensor
# gathers instead, which a caller may tell apart by the index)
_SPELLINGS = {
    "T": "numpy_T",
    "H": "matrix_H",
    "getitem": "select",
    "__getitem__": "select",
    # ``x.data``: a property with no ATen operator; it is ``x`` detached, same storage
    "data": "detach",
}

# ATen operations whose schemas leave out an alias their result may be (checked by
# test_views.py against eager, so that a torch that starts annotating them shows)
_UNANNOTATED_VIEWS = frozenset(
    {
        # "unsafe": views of self that autograd is not told of, annotated as new tensors
        "unsafe_split", "unsafe_chunk", "unsafe_split_with_sizes",
        # self itself, or an ``unsqueeze``/``view`` of it where dimensions are missing
        "atleast_1d", "atleast_2d", "atleast_3d",
        # one operand: ``permute``/``diagonal`` views of it where nothing is summed
        "einsum",
        # ``expand`` views of each tensor of the list
        "broadcast_tensors", "meshgrid",
    }
)  # fmt: skip


def _returns_alias(schema: Any) -> bool:
    """Whether ``schema`` takes a tensor ``self`` it does not write and returns an alias of it."""
    if not schema.arguments or not schema.returns:
        return False
    first, result = schema.arguments[0], schema.returns[0]
    taken, given = first.alias_info, result.alias_info
    return (
        isinstance(first.type, torch._C.TensorType)
        and taken is not None
        and given is not None
        and not taken.is_write
        and not given.is_write
    )


@functools.cache
def view_name(name: str) -> bool:
    """Whether the ATen operator (or its Python spelling) ``name`` may give a view of its
    input."""
    aten = _SPELLINGS.get(name, name)
    if aten in _UNANNOTATED_VIEWS:
        return True
    schemas = torch._C._jit_get_schemas_for_operator(f"aten::{aten}")
    return any(_returns_alias(schema) for schema in schemas)


def is_view(target: Any, args: tuple[Any, ...] = ()) -> bool:
    """Whether the fx node ``target(*args)`` may give a view of its input: an ``OpOverload``
    by its own schema, a property read ``getattr(x, name)`` by ``name``, a function or a
    method name by its name."""
    if isinstance(target, torch._ops.OpOverload):
        schema = target._schema
        return schema.name.split("::")[-1] in _UNANNOTATED_VIEWS or _returns_alias(schema)
    if target is getattr:
        return len(args) > 1 and isinstance(args[1], str) and view_name(args[1])
    name = target if isinstance(target, str) else getattr(target, "__name__", None)
    return isinstance(name, str) and view_name(name)
