"""What a cache hit runs, counted without timing (issue 18).

A hit runs the record's guard and mock and no program code. Its cost must not grow with the
model at Python speed: no ``Module.__getattr__`` (submodules, parameters and buffers are read
where the module stores them), no Python-level call per tensor (the tensors are checked in one
C++ call) and one check of the global module hooks per guard, not one per module.
"""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch import nn

import magpy
from magpy._cli import load_models


class _Deep(nn.Module):
    """``depth`` blocks read as named attributes, each a linear layer with a norm."""

    def __init__(self, depth: int) -> None:
        super().__init__()
        self.depth = depth
        for i in range(depth):
            setattr(self, f"lin{i}", nn.Linear(8, 8))
            setattr(self, f"norm{i}", nn.LayerNorm(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.depth):
            x = getattr(self, f"norm{i}")(torch.relu(getattr(self, f"lin{i}")(x)))
        return x


@contextmanager
def _python_calls() -> Iterator[list[Any]]:
    """The code objects of the Python functions called meanwhile (this thread), those the
    operator graph runs (an fx ``forward`` and what it calls) left out: MagPy's own work."""
    calls: list[Any] = []
    in_graph = [0]  # depth inside the graph's forward

    def profile(frame: Any, event: str, arg: Any) -> None:
        graph = frame.f_code.co_filename.startswith("<eval_with_key>")
        if event == "call":
            if in_graph[0] or graph:
                in_graph[0] += 1
            else:
                calls.append(frame.f_code)
        elif event == "return" and in_graph[0]:
            in_graph[0] -= 1

    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(None)


def _hit(compiled: Callable[..., Any], x: torch.Tensor) -> list[Any]:
    before = magpy.stats(compiled).hits
    with _python_calls() as calls:
        compiled(x)
    assert magpy.stats(compiled).hits == before + 1, "the measured call was not a hit"
    return calls


def _compiled(depth: int) -> tuple[nn.Module, Callable[..., Any]]:
    """The model compiled, recorded and warm: past the first hit, after which its guard keeps
    a memo."""
    torch.manual_seed(0)
    model = _Deep(depth)
    compiled = magpy.compile(model, backend="eager")
    for _ in range(4):
        x = torch.randn(2, 8)
        torch.testing.assert_close(compiled(x), model(x))
    return model, compiled


def test_a_hit_runs_no_module_getattr() -> None:
    """Submodules, parameters and buffers are read from ``_modules``/``_parameters``/
    ``_buffers`` on a hit (and the result still equals eager)."""
    model, compiled = _compiled(6)
    x = torch.randn(2, 8)
    calls = _hit(compiled, x)
    getattr_code = nn.Module.__getattr__.__code__
    assert getattr_code not in calls
    torch.testing.assert_close(compiled(x), model(x))


def test_python_calls_per_hit_do_not_grow_with_depth() -> None:
    """A 4-block and a 24-block model make the same Python calls on a hit: the guard's
    per-module and per-tensor checks are inline, or in one C++ tensor check."""
    _, small = _compiled(4)
    _, large = _compiled(24)
    x = torch.randn(2, 8)
    n_small, n_large = len(_hit(small, x)), len(_hit(large, x))
    assert n_small == n_large, (n_small, n_large)
    assert n_large < 20, n_large


def test_the_memo_guard_misses_what_the_python_guard_misses() -> None:
    """Warm (the guard keeps its memo), the guard still tells a changed model apart: another
    submodule type, a parameter of another shape, a hook: each call equals eager and the
    stats count misses."""
    model, compiled = _compiled(3)
    x = torch.randn(2, 8)

    def changed(change: Callable[[], Any]) -> None:
        misses = magpy.stats(compiled).misses
        change()
        torch.testing.assert_close(compiled(x), model(x))
        assert magpy.stats(compiled).misses > misses

    changed(lambda: setattr(model, "norm1", nn.Identity()))
    # the same shape, other strides
    changed(lambda: setattr(model.lin0, "weight", nn.Parameter(torch.randn(8, 8).t())))
    changed(lambda: setattr(model, "depth", 2))
    changed(lambda: model.lin1.register_forward_hook(lambda m, a, out: out * 2))


def test_guard_lines_per_module_are_bounded() -> None:
    """The generated guard of the deep model: one line per global-hook check in all, and a
    bounded number of lines per module (no per-tensor Python check)."""
    _, compiled = _compiled(16)
    record = compiled._magpy_state.records[0]  # type: ignore[attr-defined]
    body = [line for line in record.guard_source.splitlines() if "return None" in line]
    hooks = [
        name
        for name, obj in record.guard_code.globals.items()
        if obj is nn.modules.module._global_forward_hooks
    ]
    assert len(hooks) == 1
    assert sum(bool(re.search(rf"\b{hooks[0]}\b", line)) for line in body) == 1
    modules = 1 + 2 * 16
    assert len(body) <= 12 * modules, len(body)
    assert ".dtype is" not in record.guard_source  # (static tensors are checked in C++)


def test_site_records_in_split_mode_serve_calls() -> None:
    """A loop with a graph break in its body runs as segments whose records are served at
    sites, again and again, and the results stay eager's."""

    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        for i in range(n):
            x = torch.relu(x) + i
            print("", end="")  # a graph break in the loop
        return x

    compiled = magpy.compile(f, backend="eager")
    for _ in range(6):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, 4), f(x, 4))
    state = compiled._magpy_state  # type: ignore[attr-defined]
    assert state.split and magpy.stats(compiled).hits >= 10
    served = [rec for rec in state.site_records if rec.hits >= 2]
    assert served


def _split_lstm() -> tuple[nn.Module, Callable[..., Any], list[Any]]:
    """The zoo's LSTM built from cells, in split mode (its loop runs in chunks of steps), warm:
    the records of the loop's head site have served calls. (Lengths 4..10 have whole-call
    records, made before the record budget split the loop; 11..13 run split.)"""
    model, _ = load_models().MODELS["lstm"]("small")
    compiled = magpy.compile(model, backend="eager")
    with torch.no_grad():
        for n in (4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 11, 12, 13):
            x = torch.randn(n, 2, 32)
            torch.testing.assert_close(compiled(x), model(x))
    state = compiled._magpy_state  # type: ignore[attr-defined]
    assert state.split
    served = [rec for rec in state.site_records if rec.hits >= 2]
    return model, compiled, served


def test_a_site_guard_keeps_a_memo_for_self() -> None:
    """A site in a method keeps its guard's memo for ``self``: the module tree under it is not
    walked on a site hit (no ``Module.__getattr__`` outside the graph)."""
    model, compiled, served = _split_lstm()
    memos = [rec.memo_guard_code.memo for rec in served if rec.memo_guard_code is not None]
    assert memos and all(m.state is not None and m.off is None for m in memos), memos
    x = torch.randn(13, 2, 32)
    with torch.no_grad():
        before = magpy.stats(compiled)
        with _python_calls() as calls:
            out = compiled(x)
        after = magpy.stats(compiled)
        torch.testing.assert_close(out, model(x))
    # entry, chunks of 8 and 4 iterations, the tail of 1 with what follows the loop
    assert after.hits - before.hits >= 4 and after.misses == before.misses, (before, after)
    assert nn.Module.__getattr__.__code__ not in calls


@pytest.mark.parametrize("change", ["replace_head", "new_weight", "training", "other_instance"])
def test_a_change_under_a_site_memo_is_caught(change: str) -> None:
    """What a site guard's memo stands for changes between calls: the next call equals eager
    (a second instance of the class, at the same sites, gets records of its own)."""
    model, compiled, _ = _split_lstm()
    if change == "replace_head":
        model.head = nn.Linear(64, 32)
    elif change == "new_weight":
        model.cells[1].weight_hh = nn.Parameter(torch.randn(256, 64))
    elif change == "training":
        model.cells[0].train()
    else:
        torch.manual_seed(1)
        model = copy.deepcopy(model)
        for p in model.parameters():
            p.data.normal_()
        compiled = magpy.compile(model, backend="eager")
    with torch.no_grad():
        for n in (13, 12, 11):  # (split calls: served at the loop's head)
            x = torch.randn(n, 2, 32)
            torch.testing.assert_close(compiled(x), model(x))
