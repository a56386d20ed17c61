"""torch's dimension markers on input tensors decide which dims the FIRST record makes symbolic.

``torch._dynamo.mark_dynamic``, ``maybe_mark_dynamic`` and ``mark_unbacked`` (in
``torch._dynamo.decorators``) make a dim dynamic from the first capture, so a change of that
size never costs a second record (under ``dynamic=None``, ``True`` and ``False`` alike, as in
TorchDynamo, where a marker beats ``dynamic=False``). ``mark_static`` keeps a dim static
under ``dynamic=True`` and after a miss saw it change (automatic dynamic); a dim marked both
ways is dynamic. The markers are read in ``magpy_monitor.core.shapes.dynamic_dims``. Every test
compares to eager and counts records and hits with ``magpy.stats``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn

import magpy

MARKERS: dict[str, Callable[[torch.Tensor, int], None]] = {
    "mark_dynamic": torch._dynamo.mark_dynamic,
    "maybe_mark_dynamic": torch._dynamo.maybe_mark_dynamic,
    "mark_unbacked": torch._dynamo.decorators.mark_unbacked,
}


def rows(x: torch.Tensor) -> torch.Tensor:
    return (x.relu() * 2).sum(1) + x.shape[1]


def same(compiled: Callable[..., Any], eager: Callable[..., Any], *args: Any, **kw: Any) -> None:
    torch.testing.assert_close(compiled(*args, **kw), eager(*args, **kw), rtol=0, atol=0)


def counts(compiled: Any) -> tuple[int, int]:
    """``(records, hits)``."""
    st = magpy.stats(compiled)
    return st.records, st.hits


def marked(shape: tuple[int, ...], how: str, dim: int) -> torch.Tensor:
    t = torch.randn(*shape)
    MARKERS[how](t, dim)
    return t


@pytest.mark.parametrize("dynamic", [None, True, False])
@pytest.mark.parametrize("how", MARKERS)
def test_marked_dim_is_symbolic_in_the_first_record(how: str, dynamic: bool | None) -> None:
    """One record serves every size of the marked dim, from the second call on."""
    compiled = magpy.compile(rows, backend="eager", dynamic=dynamic)
    same(compiled, rows, marked((3, 4), how, 0))
    for n in (5, 8, 2, 11):
        same(compiled, rows, torch.randn(n, 4))
    assert counts(compiled) == (1, 4)


def test_unmarked_dims_keep_the_dynamic_setting() -> None:
    """dynamic=False with a marker: the marked dim is dynamic, the other stays static (one
    record per size of it); without the marker every size is a record."""
    compiled = magpy.compile(rows, backend="eager", dynamic=False)
    same(compiled, rows, marked((3, 4), "mark_dynamic", 0))
    same(compiled, rows, torch.randn(6, 4))
    same(compiled, rows, torch.randn(6, 5))
    same(compiled, rows, torch.randn(6, 7))
    assert counts(compiled) == (3, 1)
    magpy.reset()
    plain = magpy.compile(rows, backend="eager", dynamic=False)
    for n in (3, 6, 9):
        same(plain, rows, torch.randn(n, 4))
    assert counts(plain) == (3, 0)


def test_marker_on_a_tensor_in_a_list_and_a_keyword() -> None:
    """Markers are read wherever the entry tensor comes from (a list item, a keyword)."""

    def both(xs: list[torch.Tensor], *, y: torch.Tensor) -> torch.Tensor:
        return xs[0].sum(0) + y.mean(0)

    compiled = magpy.compile(both, backend="eager")
    a, b = marked((3, 4), "mark_dynamic", 0), marked((5, 4), "mark_dynamic", 0)
    same(compiled, both, [a], y=b)
    for n, m in ((6, 2), (9, 7), (4, 4)):
        same(compiled, both, [torch.randn(n, 4)], y=torch.randn(m, 4))
    assert counts(compiled) == (1, 3)


def test_mark_static_holds_under_dynamic_true() -> None:
    """dynamic=True makes every dim dynamic but the one marked static: a change of that one
    is a new record, a change of the others is not."""
    compiled = magpy.compile(rows, backend="eager", dynamic=True)
    x = torch.randn(3, 4)
    torch._dynamo.mark_static(x, 1)
    same(compiled, rows, x)
    same(compiled, rows, torch.randn(7, 4))
    assert counts(compiled) == (1, 1)
    y = torch.randn(7, 6)
    torch._dynamo.mark_static(y, 1)
    same(compiled, rows, y)
    same(compiled, rows, torch.randn(9, 6))
    assert counts(compiled) == (2, 2)


def test_mark_static_holds_under_automatic_dynamic() -> None:
    """dynamic=None: a size that changes becomes dynamic after one miss, unless marked
    static: then each size is a record of its own (up to the record limit)."""
    compiled = magpy.compile(rows, backend="eager")
    for n in (3, 5, 7, 9):
        x = torch.randn(n, 4)
        torch._dynamo.mark_static(x, 0)
        same(compiled, rows, x)
        same(compiled, rows, x)
    assert counts(compiled) == (4, 4)
    magpy.reset()
    auto = magpy.compile(rows, backend="eager")
    for n in (3, 5, 7, 9):
        x = torch.randn(n, 4)
        same(auto, rows, x)
        same(auto, rows, x)
    assert counts(auto) == (2, 6)  # static, then dynamic in dim 0


def test_mark_static_on_every_dim_and_mark_dynamic_wins() -> None:
    """``mark_static(x)`` marks every dim; a dim also marked dynamic is dynamic (TorchDynamo's
    precedence)."""
    compiled = magpy.compile(rows, backend="eager", dynamic=True)
    x = torch.randn(3, 4)
    torch._dynamo.mark_static(x)
    torch._dynamo.mark_dynamic(x, 0)
    same(compiled, rows, x)
    same(compiled, rows, torch.randn(8, 4))  # dim 0 dynamic: a hit
    same(compiled, rows, torch.randn(8, 5))  # dim 1 static: a record
    assert counts(compiled) == (2, 1)


def test_marked_batch_of_a_module() -> None:
    """A module's input marked on its batch dim: one record for every batch size."""
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    compiled = magpy.compile(model, backend="eager")
    x = torch.randn(4, 6)
    torch._dynamo.mark_dynamic(x, 0)
    same(compiled, model, x)
    for n in (2, 5, 16, 3):
        same(compiled, model, torch.randn(n, 6))
    assert counts(compiled) == (1, 4)


def test_size_one_stays_specialised_even_when_marked() -> None:
    """Sizes 0 and 1 are specialised, marked or not (as TorchDynamo's backed sizes): a size-1
    first call marked dynamic records statically; the second size gets a record of its own."""
    compiled = magpy.compile(rows, backend="eager")
    same(compiled, rows, marked((1, 4), "mark_dynamic", 0))
    same(compiled, rows, marked((5, 4), "mark_dynamic", 0))
    same(compiled, rows, torch.randn(9, 4))
    assert counts(compiled) == (2, 1)
