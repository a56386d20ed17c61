"""Views read from ATen's alias annotations (core/views.py): the one definition the monitor
(copied ``x[t]`` views) and codegen (graphs with nothing to fuse) share."""

from __future__ import annotations

import operator

import pytest
import torch

from magpy_monitor import is_view
from magpy_monitor.core.views import view_name

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
