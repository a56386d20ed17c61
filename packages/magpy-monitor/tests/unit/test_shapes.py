"""Symbolic sizes while monitoring (_shapes.py): which dims are dynamic, what the graph computes,
and which sizes Python's use of them specialises."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn as nn

from magpy_monitor import CaptureResult, capture, dim_key
from magpy_monitor.core.shapes import FAKE, dynamic_dims, tensor_meta
from magpy_refgraph import Apply, Constant, GraphOut, GuardKind, Item, Local, Path

ARG0 = Path(Local("args"), (Item(0),))


def _metas(result: CaptureResult) -> list[tuple[Any, ...]]:
    """The TENSOR_META payloads guarded on the first argument."""
    assert result.failure is None, repr(result.failure)
    assert result.plan is not None
    return [
        g.payload for g in result.plan.guards if g.kind is GuardKind.TENSOR_META and g.path == ARG0
    ]


def _dynamic(fn: Any, *args: Any, dims: tuple[int, ...] | None = None) -> CaptureResult:
    """Capture ``fn(*args)`` with ``dims`` of the first argument dynamic (None: all dims)."""
    if dims is None:
        return capture(fn, args, {}, promote_all=True)
    return capture(fn, args, {}, dynamic_paths=frozenset(dim_key(ARG0, d) for d in dims))


def _code(result: CaptureResult) -> str:
    assert result.graph is not None
    return result.graph.python_code("self").src


class TestDynamicDims:
    def test_named_dims_of_size_two_or_more(self) -> None:
        t = torch.ones(1, 3, 4)
        keys = {dim_key(ARG0, d) for d in range(3)}
        assert dynamic_dims(t, ARG0, keys, False) == (1, 2)
        assert dynamic_dims(t, ARG0, {dim_key(ARG0, 2)}, False) == (2,)
        assert dynamic_dims(t, ARG0, frozenset(), True) == (1, 2)
        assert dynamic_dims(t, ARG0, frozenset(), False) == ()

    def test_parameters_and_strided_views_stay_static(self) -> None:
        assert dynamic_dims(nn.Parameter(torch.ones(3, 4)), ARG0, frozenset(), True) == ()
        assert dynamic_dims(torch.ones(4, 3).t(), ARG0, frozenset(), True) == ()

    def test_meta_payload_leaves_dynamic_sizes_out(self) -> None:
        t = torch.ones(2, 3)
        assert tensor_meta(t, (0,))[3:5] == ((None, 3), "contiguous")
        assert tensor_meta(t)[3:5] == ((2, 3), (3, 1))


class TestSymbolicSizes:
    def test_size_used_by_an_operator_is_a_graph_node(self) -> None:
        result = _dynamic(lambda x: x.relu().view(x.shape[0], -1), torch.ones(3, 4), dims=(0,))
        assert _metas(result) == [tensor_meta(torch.ones(3, 4), (0,))]
        assert ".size(0)" in _code(result)

    def test_placeholder_carries_a_symbolic_fake(self) -> None:
        result = _dynamic(lambda x: x * 2, torch.ones(3, 4), dims=(0,))
        assert result.graph is not None
        (ph,) = [n for n in result.graph.nodes if n.op == "placeholder"]
        fake = ph.meta[FAKE]
        assert isinstance(fake.shape[0], torch.SymInt) and fake.shape[1] == 4

    def test_size_arithmetic_is_recorded(self) -> None:
        def fn(x: torch.Tensor) -> torch.Tensor:
            return torch.zeros(x.size(0) * 2 + 1, x.size(1) // 2)

        result = _dynamic(fn, torch.ones(3, 4))
        code = _code(result)
        assert "mul" in code and "add" in code and "floordiv" in code

    def test_static_dims_of_computed_tensors_stay_constants(self) -> None:
        lin = nn.Linear(4, 6)

        def fn(x: torch.Tensor) -> torch.Tensor:
            h = lin(x)
            return h.view(h.shape[0], h.shape[1] // 2, 2)

        result = _dynamic(fn, torch.ones(3, 4), dims=(0,))
        assert _metas(result) == [tensor_meta(torch.ones(3, 4), (0,))]
        code = _code(result)
        assert ".size(0)" in code and ".size(1)" not in code

    def test_python_control_flow_specialises_the_size(self) -> None:
        def fn(x: torch.Tensor) -> torch.Tensor:
            for i in range(x.shape[0]):
                x = x + i
            return x

        result = _dynamic(fn, torch.ones(3, 4))
        metas = _metas(result)
        assert tensor_meta(torch.ones(3, 4), (0, 1)) in metas
        assert tensor_meta(torch.ones(3, 4), (1,)) in metas  # dim 0 now guarded by value

    def test_branch_on_a_computed_size_guards_the_relation(self) -> None:
        """``2 * s0 > 4`` decides the branch: the ShapeEnv guards it, the size stays symbolic."""

        def fn(x: torch.Tensor) -> torch.Tensor:
            h = torch.cat([x, x])
            return h * 2 if h.shape[0] > 4 else h

        result = _dynamic(fn, torch.ones(3, 4), dims=(0,))
        assert _metas(result) == [tensor_meta(torch.ones(3, 4), (0,))]

    def test_branch_on_a_size_and_a_python_int_specialises_it(self) -> None:
        """A size compared with an int that is not a size of the program's (here: ``%``, not
        an operation sizes keep symbolic through) is specialised."""

        def fn(x: torch.Tensor) -> torch.Tensor:
            return x * 2 if (x.shape[0] ** 2) > 4 else x

        result = _dynamic(fn, torch.ones(3, 4), dims=(0,))
        assert tensor_meta(torch.ones(3, 4)) in _metas(result)

    def test_stride_read_specialises_everything(self) -> None:
        result = _dynamic(lambda x: x * x.stride(0), torch.ones(3, 4))
        assert tensor_meta(torch.ones(3, 4)) in _metas(result)

    def test_dtype_read_keeps_sizes_symbolic(self) -> None:
        result = _dynamic(lambda x: x.to(x.dtype).view(x.size(0), -1), torch.ones(3, 4), dims=(0,))
        assert _metas(result) == [tensor_meta(torch.ones(3, 4), (0,))]

    @pytest.mark.parametrize(
        "fn",
        [lambda x: (x.sum(), x.shape[0]), lambda x: (x.sum(), len(x))],
        ids=["shape", "len"],
    )
    def test_returned_size_comes_from_the_graph(self, fn: Any) -> None:
        result = _dynamic(fn, torch.ones(3, 4), dims=(0,))
        assert result.plan is not None
        assert isinstance(result.plan.result.parts[1], GraphOut)

    def test_returned_expression_over_a_size_is_replayed(self) -> None:
        result = _dynamic(lambda x: (x.sum(), x.shape[0] + 1), torch.ones(3, 4), dims=(0,))
        assert result.plan is not None
        assert isinstance(result.plan.result.parts[1], Apply)

    def test_a_pure_call_on_a_size_specialises_it(self) -> None:
        result = _dynamic(lambda x: (x.sum(), max(x.shape[0], 2)), torch.ones(3, 4), dims=(0,))
        assert result.plan is not None
        assert isinstance(result.plan.result.parts[1], Constant)
        assert tensor_meta(torch.ones(3, 4)) in _metas(result)

    def test_static_capture_is_unchanged(self) -> None:
        result = capture(lambda x: x.view(x.shape[0], -1), (torch.ones(3, 4),), {})
        assert _metas(result) == [tensor_meta(torch.ones(3, 4))]
        assert ".size(" not in _code(result)
