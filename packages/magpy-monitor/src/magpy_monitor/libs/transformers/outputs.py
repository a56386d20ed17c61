"""Model outputs (``transformers``' ``ModelOutput``, ``diffusers``' ``BaseOutput``): built by
filling, so the mock builds them from their final state.

Every Hugging Face model returns one: a ``@dataclass`` over an ``OrderedDict`` whose
``__post_init__`` copies each field that is not None into the items, whose ``__setattr__`` and
``__setitem__`` keep fields and items in step, and whose construction registers the class as a
pytree node once. The monitor replays such a construction (``pyobj.objects.construct``); calling
the class again on every cache hit runs a few hundred lines of the library's Python (``fields()``,
``is_tensor``, the checks), more than the rest of a hit. Building the object from its final state
(``pyobj.objects.filled_recipe``) gives the same object without them.

That is sound for a construction whose code is the library's own and does nothing but fill the
object: the class defines none of the hooks itself (they are the base's, or the ``__init__``
``@dataclass`` generated), the pytree registration has happened (the recording run made it; it
is skipped for a registered class). A deprecated key name (``past_key_values``/``cache_params``,
which transformers 5 renames to ``cache``) logs through ``logger.warning_once``, an
``lru_cache``: the recording run made that call, so on a hit it could only count a cache hit of
transformers' own; the renamed field is part of the final state the mock builds.
"""

from __future__ import annotations

import sys
import types

import torch.utils._pytree as pytree

from ...core.registry import FILLING_CONSTRUCTIONS
from ...core.values import Construction
from ...pyobj.instances import lookup
from ...pyobj.objects import is_generated_init

__all__ = ["fills_only"]

# (module, base class): the hooks a construction and a later change run must be the base's
_BASES = (
    ("transformers.utils.generic", "ModelOutput"),
    ("diffusers.utils.outputs", "BaseOutput"),
)
_HOOKS = ("__new__", "__post_init__", "__setattr__", "__setitem__", "__delattr__")


def _init_is_generated(cls: type, base: type) -> bool:
    """The ``__init__`` of ``cls`` is the one ``@dataclass`` generated (or the library's wrapper
    of it that renames deprecated keyword arguments, built by the base's metaclass)."""
    init = lookup(cls, "__init__")
    if not isinstance(init, types.FunctionType):
        return False
    wrapped = getattr(init, "__wrapped__", None)
    if isinstance(wrapped, types.FunctionType):
        meta_setattr = vars(type(base)).get("__setattr__")
        made_by_meta = isinstance(meta_setattr, types.FunctionType) and (
            init.__code__ in meta_setattr.__code__.co_consts
        )
        if not made_by_meta:
            return False
        init = wrapped
    return is_generated_init(init)


def fills_only(ctor: Construction) -> bool:
    """The construction ``ctor`` (and the changes made to its object since) only fills the
    object, by the library's own code (see the module doc)."""
    cls = ctor.cls
    for module_name, base_name in _BASES:
        module = sys.modules.get(module_name)
        base = getattr(module, base_name, None)
        if not isinstance(base, type) or not isinstance(cls, type) or not issubclass(cls, base):
            continue
        if cls is base or type(cls) is not type(base):
            return False
        if any(lookup(cls, hook) is not lookup(base, hook) for hook in _HOOKS):
            return False
        return _init_is_generated(cls, base) and cls in pytree.SUPPORTED_NODES
    return False


FILLING_CONSTRUCTIONS.append(fills_only)
