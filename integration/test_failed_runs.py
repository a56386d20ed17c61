"""A record's graph that raises or misses leaves the state eager leaves, and what a record writes
back is only what changed (``magpy_monitor.core.undo``, ``driver.planner._live``/``_changed``).

- An operation that updates a tensor without saying so (``F.batch_norm``'s running statistics)
  is put back when a check after the graph misses: the program then runs again natively, and
  the statistics must be updated once, as in eager.
- A training step whose loss raises on a hit (a class index out of range) raises eager's error
  with eager's effects (the BatchNorm statistics updated, the parameters not), and training
  goes on equal to eager. Only the inputs an update may have written before the raise are
  copied before each run (not every parameter and optimizer buffer).
- A gradient set and then set to ``None`` in the same step, and an optimizer state entry set to
  the very tensor it held, are not written back by the mock.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import pytest
import torch
from torch import nn

import magpy
from magpy_codegen._mock import Saver
from magpy_refgraph import ReplaceContents

BACKENDS = ["eager", pytest.param("inductor", marks=pytest.mark.inductor)]


def _record(compiled: Any) -> Any:
    (rec,) = compiled._magpy_state.records
    return rec


def _saver(rec: Any) -> Saver:
    (saver,) = [v for v in rec.mock_code.globals.values() if isinstance(v, Saver)]
    return saver


@pytest.mark.parametrize("backend", BACKENDS)
def test_batchnorm_statistics_are_put_back_when_a_check_misses(backend: str) -> None:
    torch.manual_seed(0)
    bn = nn.BatchNorm1d(4)
    ref = copy.deepcopy(bn)

    def program(norm: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
        def f(x: torch.Tensor) -> torch.Tensor:
            y = norm(x)
            if x.sum().item() > 0:  # (a value read the record assumes)
                return y * 2
            return y - 1

        return f

    compiled, eager = magpy.compile(program(bn), backend=backend), program(ref)
    g = torch.Generator().manual_seed(1)
    shifts = [1, 1, 1, 1, -5, 1, -5]  # the record assumes a positive sum; two calls miss
    for i, shift in enumerate(shifts):
        x = torch.randn(3, 4, generator=g) + shift
        H.assert_same(compiled(x), eager(x), f"call {i}")
        H.assert_same(bn.state_dict(), ref.state_dict(), f"statistics after call {i}")
    st = magpy.stats(compiled)
    assert st.assumption_misses >= 1 and st.hits >= 3, st


def _classifier() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))


def _step(model: nn.Module, opt: torch.optim.Optimizer, counter: torch.Tensor) -> Any:
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        counter.add_(1)  # (before the loss in program order: eager's effect even if it raises)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step


def _everything(model: nn.Module, opt: torch.optim.Optimizer, counter: torch.Tensor) -> Any:
    params = [p for group in opt.param_groups for p in group["params"]]
    grads = [p.grad for p in model.parameters()]
    return model.state_dict(), [opt.state[p] for p in params], grads, counter


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_step_whose_loss_raises_leaves_eagers_state(backend: str) -> None:
    model, reference = _classifier(), _classifier()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    counter, ref_counter = torch.zeros(()), torch.zeros(())
    compiled = magpy.compile(_step(model, opt, counter), backend=backend)
    eager = _step(reference, ref_opt, ref_counter)
    g = torch.Generator().manual_seed(2)
    for i in range(8):
        x, y = torch.randn(5, 8, generator=g), torch.randint(0, 4, (5,), generator=g)
        if i in (4, 6):
            y[2] = 7  # a class that does not exist: cross_entropy raises
        outcome = []
        for fn in (compiled, eager):
            try:
                outcome.append(fn(x, y))
            except IndexError as exc:
                outcome.append(str(exc))
        H.assert_same(outcome[0], outcome[1], f"step {i}")
        H.assert_same(
            _everything(model, opt, counter),
            _everything(reference, ref_opt, ref_counter),
            f"state after step {i}",
        )
    st = magpy.stats(compiled)
    assert st.records == 1 and st.graphs == 1 and st.fallbacks == 0, st
    assert st.hits >= 4, st
    saver = _saver(_record(compiled))
    # only the counter, the step-less SGD's BatchNorm statistics and nothing the loss decides
    # (parameters, momentum buffers) is copied before each run
    params = len(list(model.parameters()))
    assert len(saver.updated) >= 2 * params and len(saver.needed) == 4, (
        saver.updated,
        saver.needed,
    )


def test_dead_and_unchanged_writes_are_not_replayed() -> None:
    model = _classifier()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    compiled = magpy.compile(_step(model, opt, torch.zeros(())), backend="eager")
    g = torch.Generator().manual_seed(3)
    for _ in range(4):
        compiled(torch.randn(5, 8, generator=g), torch.randint(0, 4, (5,), generator=g))
    plan = _record(compiled).plan
    # .grad set by backward then set to None by zero_grad: only None is written back, so the
    # graph hands out the loss alone; momentum_buffer set to the buffer it held: no write-back
    assert plan.num_outputs == 1, plan.num_outputs
    assert not any(isinstance(w, ReplaceContents) for w in plan.writebacks), plan.writebacks
    assert model[0].weight.grad is None


ORDERS: dict[str, Callable[[dict[str, Any], list[Any]], None]] = {
    "pop and put back": lambda d, xs: d.__setitem__("a", d.pop("a")),  # order changes
    "set the same": lambda d, xs: d.__setitem__("a", d["a"]),  # nothing changes
    "list pop and append": lambda d, xs: xs.append(xs.pop(0)),  # order changes
    "list pop and append last": lambda d, xs: xs.append(xs.pop()),  # nothing changes
}


@pytest.mark.parametrize("name", list(ORDERS))
def test_containers_end_as_in_eager(name: str) -> None:
    change = ORDERS[name]

    def program(d: dict[str, Any], xs: list[Any]) -> Callable[[torch.Tensor], torch.Tensor]:
        def f(t: torch.Tensor) -> torch.Tensor:
            change(d, xs)
            return t * d["a"] + xs[0]

        return f

    d, xs = {"a": torch.ones(2), "b": torch.zeros(2)}, [torch.ones(2), torch.zeros(2)]
    d2, xs2 = dict(d), list(xs)
    compiled, eager = magpy.compile(program(d, xs), backend="eager"), program(d2, xs2)
    for i in range(5):
        t = torch.full((2,), float(i))
        H.assert_same(compiled(t), eager(t), f"call {i}")
        assert list(d) == list(d2) and all(d[k] is d2[k] for k in d), (name, i)
        assert [id(x) for x in xs] == [id(x) for x in xs2], (name, i)
    assert magpy.stats(compiled).hits >= 3, magpy.stats(compiled)
