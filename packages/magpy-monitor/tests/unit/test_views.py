"""Views read from ATen's alias annotations (core/views.py): the one definition the monitor
(copied ``x[t]`` views) and codegen (graphs with nothing to fuse) share."""

from __future__ import annotations

import operator

import pytest
import torch

from magpy_monitor import is_view
from magpy_monitor.core.views import _UNANNOTATED_VIEWS, _returns_alias, view_name

# the names the monitor and codegen each listed by hand before (codegen's metadata reads,
# ``size``/``dim``/``numel``/``stride``, are not views and stay its own)
LISTED = (
    "view view_as reshape reshape_as transpose permute squeeze unsqueeze expand expand_as "
    "narrow select getitem __getitem__ t T mT split chunk unbind as_strided flatten unflatten "
    "diagonal movedim swapaxes detach alias unfold real imag contiguous"
).split()


@pytest.mark.parametrize("name", LISTED)
def test_every_hand_listed_view_is_a_view(name: str) -> None:
    """Each operation the old lists named is a view by its schema (no answer changed)."""
    assert view_name(name)


@pytest.mark.parametrize(
    "name", ["add", "mul", "clone", "index", "size", "dim", "numel", "sum", "add_", "copy_"]
)
def test_new_tensors_metadata_and_writes_are_not_views(name: str) -> None:
    """A new tensor (``add``, ``index``), a number (``size``) or a written ``self`` (``add_``,
    ``Tensor(a!)``) is no view."""
    assert not view_name(name)


def test_in_place_views_are_not_views() -> None:
    """``transpose_`` writes its ``self`` (``Tensor(a!)``): an update, not a view."""
    assert not view_name("transpose_") and view_name("transpose")


def test_targets_of_each_kind() -> None:
    """fx targets: torch functions and Tensor methods by name, method names as strings,
    ``operator.getitem`` (basic indexing), an OpOverload by its own schema."""
    assert is_view(torch.transpose) and is_view(torch.Tensor.view) and is_view("unsqueeze")
    assert is_view(operator.getitem)
    assert is_view(torch.ops.aten.slice.Tensor) and is_view(torch.ops.aten.view.default)
    assert not is_view(torch.ops.aten.index.Tensor) and not is_view(torch.add)
    assert not is_view(torch.ops.aten.transpose_.default) and not is_view(len)


@pytest.mark.parametrize("name", ["T", "mT", "H", "mH", "real", "imag", "data"])
def test_properties_that_are_views(name: str) -> None:
    """A property read ``getattr(x, name)`` (how the recorder spells ``x.T``) is a view by
    the operator behind it (``x.data``: ``detach``); metadata properties are not."""
    assert is_view(getattr, (None, name))
    x = torch.randn(2, 3, dtype=torch.complex64)
    assert getattr(x, name).untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


@pytest.mark.parametrize("name", ["shape", "dtype", "grad", "device", "is_leaf"])
def test_metadata_properties_are_not_views(name: str) -> None:
    assert not is_view(getattr, (None, name)) and not is_view(getattr, ())


# each operation of the explicit table, with a call whose result shares its input's storage
_UNANNOTATED = {
    "unsafe_split": lambda x: x.unsafe_split(1)[1],
    "unsafe_chunk": lambda x: x.unsafe_chunk(2)[1],
    "unsafe_split_with_sizes": lambda x: x.unsafe_split_with_sizes([1, 1])[1],
    "atleast_1d": lambda x: torch.atleast_1d(x[0, 0]),
    "atleast_2d": lambda x: torch.atleast_2d(x[0]),
    "atleast_3d": lambda x: torch.atleast_3d(x),
    "einsum": lambda x: torch.einsum("ij->ji", x),
    "broadcast_tensors": lambda x: torch.broadcast_tensors(x, torch.ones(3, 2, 3))[0],
    "meshgrid": lambda x: torch.meshgrid(x[0], x[1], indexing="ij")[1],
}


def test_the_explicit_table_is_the_one_tested() -> None:
    assert frozenset(_UNANNOTATED) == _UNANNOTATED_VIEWS


@pytest.mark.parametrize("name", sorted(_UNANNOTATED))
def test_views_the_schemas_leave_unsaid(name: str) -> None:
    """Each entry of the explicit table returns a view in eager although no schema of it
    says so (when a torch release annotates one, this fails: drop it from the table)."""
    schemas = torch._C._jit_get_schemas_for_operator(f"aten::{name}")
    assert schemas and not any(_returns_alias(s) for s in schemas)
    packet = getattr(torch.ops.aten, name)
    assert view_name(name) and all(is_view(getattr(packet, o)) for o in packet.overloads())
    x = torch.arange(6.0).reshape(2, 3)
    shared = _UNANNOTATED[name](x).untyped_storage().data_ptr()
    assert shared == x.untyped_storage().data_ptr()
