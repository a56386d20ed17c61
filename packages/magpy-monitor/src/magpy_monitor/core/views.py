"""Which operations give a view of their input, read from ATen's schemas.

An ATen schema annotates what its results may alias: ``view(Tensor(a) self, ...) ->
Tensor(a)`` returns (something that may be) the storage of ``self`` without writing it, while
``add_(Tensor(a!) self, ...) -> Tensor(a!)`` writes it and ``add(Tensor self, ...) -> Tensor``
returns a new tensor. An operation is a view here when one of its overloads takes a tensor
``self`` it does not write and returns an alias of it (``Tensor(a)``, or ``Tensor(a)[]`` for
``split``/``chunk``/``unbind``). That counts the operations that return ``self`` itself or a
view when they can and copy otherwise (``reshape``, ``contiguous``, ``to``): their result may
share the input's storage, which is what the monitor (a view of a copied ``x[t]`` is a copy
too, ``recorder``) and codegen (views do no work worth compiling, ``_fusable``) need to know.

This is the one definition both use, and the only module that reads schemas through
``torch._C`` (its test pins the answers for the operations MagPy meets).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

__all__ = ["is_view", "view_name"]

# Python spellings of tensor operations whose ATen operator has another name: properties
# (``x.T``) and indexing (``x[i, 1:]``: ``select``/``slice``; an index that holds a tensor
# gathers instead, which the callers tell apart by the index)
_SPELLINGS = {"T": "numpy_T", "H": "matrix_H", "getitem": "select", "__getitem__": "select"}


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
    """Whether the ATen operator (or its Python spelling) ``name`` gives a view of its input."""
    schemas = torch._C._jit_get_schemas_for_operator(f"aten::{_SPELLINGS.get(name, name)}")
    return any(_returns_alias(schema) for schema in schemas)


def is_view(target: Any) -> bool:
    """Whether the fx target ``target`` gives a view of its input: an ``OpOverload`` by its
    own schema, a function or a method name by its name."""
    if isinstance(target, torch._ops.OpOverload):
        return _returns_alias(target._schema)
    name = target if isinstance(target, str) else getattr(target, "__name__", None)
    return isinstance(name, str) and view_name(name)
