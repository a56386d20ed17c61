"""Graphs kept as AOTInductor libraries (``magpy_codegen._native``): which graphs may be, and a
library that does not give what the graph gives is refused."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.fx as fx

from magpy_codegen import compile_native, load_native, native_problem


def _graph(fn: Any) -> fx.Graph:
    return fx.symbolic_trace(fn).graph


def _problem(fn: Any, *inputs: Any, **flags: bool) -> str | None:
    options = {"grad_enabled": False, "updates_inputs": False, "draws_random": False} | flags
    return native_problem(_graph(fn), inputs, **options)


def _mlp(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (torch.relu(x @ w), x.sum(0))


def test_a_graph_of_cpu_tensors_in_and_out_may_be_a_library() -> None:
    assert _problem(_mlp, torch.randn(3, 4), torch.randn(4, 2)) is None


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        ({"updates_inputs": True}, "it updates inputs in place"),
        ({"draws_random": True}, "it draws random numbers"),
    ],
)
def test_updates_and_random_draws_are_refused(flags: dict[str, bool], reason: str) -> None:
    assert _problem(_mlp, torch.randn(3, 4), torch.randn(4, 2), **flags) == reason


def test_autograd_history_is_refused_only_with_grad_enabled() -> None:
    w = torch.randn(4, 2, requires_grad=True)
    assert _problem(_mlp, torch.randn(3, 4), w, grad_enabled=True) == "it records autograd history"
    assert _problem(_mlp, torch.randn(3, 4), w, grad_enabled=False) is None


def test_inputs_that_are_not_cpu_strided_tensors_are_refused() -> None:
    assert _problem(_mlp, torch.randn(3, 4), 2.0) == "a graph input of type float"
    sparse = torch.eye(4).to_sparse()
    assert _problem(_mlp, torch.randn(3, 4), sparse) == "a graph input of type Tensor"
    meta = torch.empty(4, 2, device="meta")
    assert _problem(_mlp, torch.randn(3, 4), meta) == "a graph input on meta"


def test_outputs_that_are_inputs_or_not_a_tuple_are_refused() -> None:
    x = torch.randn(3)
    assert _problem(lambda x: (x,), x) == "an output is not a tensor the graph computes"
    assert _problem(lambda x: x + 1, x) == "its output is not a tuple of tensors"


@pytest.mark.inductor
@pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated")
def test_a_library_gives_the_graphs_results_and_a_view_of_an_input_is_refused() -> None:
    x, w = torch.randn(3, 4), torch.randn(4, 2)
    data = compile_native(_graph(_mlp), [x, w])
    assert isinstance(data, bytes)
    native = load_native(data)
    x2 = torch.randn(3, 4)
    for got, want in zip(native(x2, w), _mlp(x2, w), strict=True):
        torch.testing.assert_close(got, want)
    # a view of an input shares its memory in eager; a library's output would not
    refused = compile_native(_graph(lambda x: (x.view(12), x + 1)), [x])
    assert refused == "output 0 shares memory with an input or another output"
