"""The C++ guard tree (``_cguard``): after ``Record.upgrade`` a record's guard accepts and
refuses what its Python guard does, and gives the same graph inputs."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from magpy_codegen import Record


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.scale = (2, 3)
        self.eps = 0.5
        self.register_buffer("shift", torch.ones(3))

    def forward(self, x: torch.Tensor, table: dict[str, int]) -> torch.Tensor:
        return self.lin(x) * self.scale[0] * self.eps + self.shift + table["k"] + len(table)


def _both(rec: Record, fn: Any, args: tuple[Any, ...]) -> tuple[Any, Any]:
    python = rec.guard(fn, args, {})
    assert rec.upgrade is not None
    rec.upgrade()
    tree = rec.guard(fn, args, {})
    return python, tree


def _fresh(record_of: Any) -> tuple[Record, _Net]:
    torch.manual_seed(0)
    net = _Net()
    rec, _ = record_of(net, torch.randn(2, 4), {"k": 1})
    return rec, net


def test_the_tree_passes_the_recorded_world_with_the_same_inputs(record_of: Any) -> None:
    rec, net = _fresh(record_of)
    x = torch.randn(2, 4)
    python, tree = _both(rec, net, (x, {"k": 1}))
    assert python is not None and tree is not None
    assert len(python) == len(tree) and all(a is b for a, b in zip(python, tree, strict=True))
    assert rec.upgrade is None and rec.tree_guard_code is not None


def test_both_accept_a_storage_offset_the_program_does_not_read(record_of: Any) -> None:
    """No operator's result depends on where its input starts in its storage: the offset is
    guarded only after the program reads one (``Capture.read_offsets``)."""
    rec, net = _fresh(record_of)
    net.shift = torch.ones(4)[1:]
    python, tree = _both(rec, net, (torch.randn(2, 4), {"k": 1}))
    assert python is not None and tree is not None


@pytest.mark.parametrize(
    "change",
    [
        "scale_float",
        "scale_bool",
        "eps",
        "eps_int",
        "dict_len",
        "dict_value",
        "shift_dtype",
        "weight_strides",
        "input_grad",
        "submodule",
        "shadowed",
        "hook",
    ],
)
def test_the_tree_refuses_what_the_python_guard_refuses(record_of: Any, change: str) -> None:
    rec, net = _fresh(record_of)
    x, table = torch.randn(2, 4), {"k": 1}
    if change == "scale_float":
        net.scale = (2.0, 3)
    elif change == "scale_bool":
        net.scale = (True, 3)
    elif change == "eps":
        net.eps = 0.25
    elif change == "eps_int":
        net.eps = 1  # type: ignore[assignment]
    elif change == "dict_len":
        table = {"k": 1, "j": 2}
    elif change == "dict_value":
        table = {"k": 1.0}  # type: ignore[dict-item]
    elif change == "shift_dtype":
        net.shift = torch.ones(3, dtype=torch.float64)
    elif change == "weight_strides":
        net.lin.weight = nn.Parameter(torch.randn(4, 3).t())
    elif change == "input_grad":
        x.requires_grad_(True)
    elif change == "submodule":
        net.lin = nn.Linear(4, 3, bias=False)
    elif change == "shadowed":
        object.__setattr__(net, "lin", nn.Linear(4, 3))
    elif change == "hook":
        net.lin.register_forward_pre_hook(lambda m, a: None)
    python, tree = _both(rec, net, (x, table))
    assert python is None and tree is None
