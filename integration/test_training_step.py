"""A training step as one record (issue 20): forward, ``loss.backward()`` and the update.

Each step shape runs eager and compiled side by side from identical initial state over several
steps; the losses, parameters, buffers and ``.grad``s must stay equal, and once warm every step
must be one record with one graph and no break (``magpy.stats``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import pytest
import torch
from torch import nn

import magpy
from magpy._cli import load_models

Step = Callable[..., Any]


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
        nn.Linear(4 * 6 * 6, 4),
    )  # fmt: skip


def sgd_by_hand(model: nn.Module) -> Step:
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
        model.zero_grad()
        return loss

    return step


def accumulate_two(model: nn.Module) -> Step:
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(())
        for xs, ys in zip(x.chunk(2), y.chunk(2), strict=True):
            loss = nn.functional.mse_loss(model(xs), ys) / 2
            loss.backward()
            total = total + loss.detach()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-0.1)
                p.grad.zero_()  # (zero_grad(set_to_none=False): the next step accumulates)
        return total

    return step


def autograd_grad(model: nn.Module) -> Step:
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.mse_loss(model(x), y)
        grads = torch.autograd.grad(loss, list(model.parameters()))
        with torch.no_grad():
            for p, g in zip(model.parameters(), grads, strict=True):
                p.sub_(0.1 * g)
        return loss

    return step


def backward_with_gradient(model: nn.Module) -> Step:
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = model(x)
        out.backward(y)  # a vector-Jacobian product: the gradient of out is y
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.01 * p.grad
                p.grad = None
        return out

    return step


def _inputs(model: nn.Module, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if isinstance(model[0], nn.Conv2d):
        return torch.randn(4, 3, 6, 6, generator=g), torch.randn(4, 4, generator=g)
    return torch.randn(4, 8, generator=g), torch.randn(4, 4, generator=g)


def _state(model: nn.Module) -> dict[str, Any]:
    out: dict[str, Any] = dict(model.state_dict())
    out.update({f"{n}.grad": p.grad for n, p in model.named_parameters()})
    return out


def _run(make_step: Callable[[nn.Module], Step], build: Callable[[], nn.Module], backend: str,
         steps: int = 8) -> Any:  # fmt: skip
    model, reference = build(), build()
    compiled = magpy.compile(make_step(model), backend=backend)
    eager = make_step(reference)
    warm: Any = None
    for i in range(steps):
        x, y = _inputs(model, i)
        got, want = compiled(x, y), eager(x, y)
        H.assert_same(got, want, f"step {i}")
        H.assert_same(_state(model), _state(reference), f"state after step {i}")
        if i == 2:
            warm = magpy.stats(compiled)
    st = magpy.stats(compiled)
    assert st.breaks == 0 and st.fallbacks == 0, st
    assert st.records == warm.records and st.hits - warm.hits == steps - 3, (warm, st)
    assert st.graphs == st.records, st  # (one graph per record: the whole step)
    return compiled, st


STEPS = [sgd_by_hand, accumulate_two, autograd_grad, backward_with_gradient]


@pytest.mark.parametrize("make_step", STEPS, ids=[s.__name__ for s in STEPS])
def test_a_step_is_one_record_eager_backend(make_step: Callable[[nn.Module], Step]) -> None:
    _run(make_step, _mlp, "eager")


def test_a_cnn_with_batchnorm_in_training() -> None:
    _, st = _run(sgd_by_hand, lambda: _cnn().train(), "eager")
    assert st.records <= 2, st


@pytest.mark.parametrize("make_step", [sgd_by_hand, accumulate_two], ids=["sgd", "accumulate"])
def test_a_step_through_inductor(make_step: Callable[[nn.Module], Step]) -> None:
    _run(make_step, _mlp, "inductor", steps=5)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_the_returned_loss_is_eagers(backend: str) -> None:
    """The loss a step returns requires grad and has a ``grad_fn``, whose graph was freed by
    the step's backward: a second backward raises eager's error."""
    compiled = magpy.compile(sgd_by_hand(_mlp()), backend=backend)
    for i in range(3):
        loss = compiled(*_inputs(_mlp(), i))
    assert magpy.stats(compiled).hits == 2
    assert loss.requires_grad and loss.grad_fn is not None
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


def test_a_hook_on_a_parameter_still_runs() -> None:
    """A hook registered on a parameter makes the backward a graph break: it runs as in eager."""
    model, reference = _mlp(), _mlp()
    seen: list[int] = []
    for m in (model, reference):
        m[0].weight.register_hook(lambda g: seen.append(1) or g * 2)
    compiled = magpy.compile(sgd_by_hand(model), backend="eager")
    eager = sgd_by_hand(reference)
    for i in range(3):
        x, y = _inputs(model, i)
        H.assert_same(compiled(x, y), eager(x, y))
        H.assert_same(_state(model), _state(reference))
    assert len(seen) == 6
    assert magpy.stats(compiled).breaks >= 1


def test_backward_through_an_input_with_history() -> None:
    """The input's history is outside the record: eager's gradient reaches ``w`` through it."""

    def f(h: torch.Tensor) -> torch.Tensor:
        loss = (h * 2).sum()
        loss.backward()
        return loss

    w = torch.randn(3, requires_grad=True)
    w2 = w.detach().clone().requires_grad_()
    compiled = magpy.compile(f, backend="eager")
    for _ in range(3):
        H.assert_same(compiled(w * 3), f(w2 * 3))
        H.assert_same(w.grad, w2.grad)


def test_grads_that_exist_are_guarded() -> None:
    """A step recorded with ``.grad`` None is not used when the grads exist (it would drop them):
    a second record accumulates into them."""
    model, reference = _mlp(), _mlp()
    compiled = magpy.compile(autograd_grad_then_backward(model), backend="eager")
    eager = autograd_grad_then_backward(reference)
    for i in range(4):
        x, y = _inputs(model, i)
        H.assert_same(compiled(x, y), eager(x, y))
        H.assert_same(_state(model), _state(reference))
    assert magpy.stats(compiled).records == 2


def autograd_grad_then_backward(model: nn.Module) -> Step:
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()  # (never zeroed: .grad accumulates over the steps)
        return loss

    return step


def test_dropout_draws_as_eager() -> None:
    def build() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.5), nn.Linear(16, 4)).train()

    torch.manual_seed(1)
    state = torch.get_rng_state()
    model, reference = build(), build()
    compiled = magpy.compile(sgd_by_hand(model), backend="eager")
    eager = sgd_by_hand(reference)
    for i in range(5):
        x, y = _inputs(model, i)
        torch.set_rng_state(state)
        got = compiled(x, y)
        torch.set_rng_state(state)
        want = eager(x, y)
        state = torch.get_rng_state()
        H.assert_same(got, want)
        H.assert_same(_state(model), _state(reference))


# ---------------------------------------------------------------------- torch.optim
OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
    "sgd_nesterov": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
    "sgd_foreach": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=True),
    "adam": lambda p: torch.optim.Adam(p, lr=0.01),
    "adam_fused": lambda p: torch.optim.Adam(p, lr=0.01, fused=True),
    "adamw_foreach": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1, foreach=True),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.01),
}


def optimizer_step(model: nn.Module, opt: torch.optim.Optimizer, clip: bool = False) -> Step:
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        opt.zero_grad()
        return loss

    return step


def _optim_state(opt: torch.optim.Optimizer) -> list[Any]:
    return [opt.state[p] for group in opt.param_groups for p in group["params"]]


def _train(make_opt: Callable[[Any], torch.optim.Optimizer], backend: str, steps: int,
           build: Callable[[], nn.Module] = _mlp, clip: bool = False) -> Any:  # fmt: skip
    """The step compiled and eager side by side; the stats once every step is a hit."""
    model, reference = build(), build()
    opt, ref_opt = make_opt(model.parameters()), make_opt(reference.parameters())
    compiled = magpy.compile(optimizer_step(model, opt, clip), backend=backend)
    eager = optimizer_step(reference, ref_opt, clip)
    for i in range(steps):
        x, y = _inputs(model, i)
        rng = torch.get_rng_state()  # (both runs draw the same numbers: Dropout)
        got = compiled(x, y)
        after, _ = torch.get_rng_state(), torch.set_rng_state(rng)
        H.assert_same(got, eager(x, y), f"step {i}")
        assert torch.equal(after, torch.get_rng_state()), f"RNG state after step {i}"
        H.assert_same(_state(model), _state(reference), f"model after step {i}")
        H.assert_same(_optim_state(opt), _optim_state(ref_opt), f"optimizer after step {i}")
        if i == 1:
            warm = magpy.stats(compiled)
    st = magpy.stats(compiled)
    # the first step makes the optimizer's state (a break on its missing entries); from the
    # second on, the whole step is one record, one graph, no break
    assert st.records == warm.records == 1 and st.graphs == 1, (warm, st)
    assert st.breaks == warm.breaks and st.fallbacks == 0, (warm, st)
    assert st.hits - warm.hits == steps - 2, (warm, st)
    return st


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_an_optimizer_step_is_one_graph(name: str) -> None:
    _train(OPTIMIZERS[name], "eager", steps=10)


def test_clip_grad_norm_and_batchnorm() -> None:
    # (SGD: Adam's step normalises the conv bias's gradient, rounding noise behind a
    # BatchNorm, into full-size updates; compiled, its bias correction is computed from the
    # step tensor in float32 as under torch.compile, not from ``.item()`` in double)
    st = _train(OPTIMIZERS["sgd_nesterov"], "eager", steps=8, build=lambda: _cnn().train(),
                clip=True)  # fmt: skip
    assert st.breaks <= 1, st


def test_adam_clips_gradients() -> None:
    _train(OPTIMIZERS["adam"], "eager", steps=6, clip=True)


# ("sgd": plain SGD updates a Linear weight by ``p.add_(grad, alpha=-lr)`` with ``grad`` an
# ``mm``; Inductor's mm+add fusion into addmm dropped that ``alpha``: see
# magpy_codegen._inductor_passes)
@pytest.mark.parametrize("name", ["sgd", "sgd_nesterov", "adam"])
def test_an_optimizer_step_through_inductor(name: str) -> None:
    _train(OPTIMIZERS[name], "inductor", steps=5)


def test_foreach_updates_are_kept() -> None:
    """``torch._foreach_*_`` ops update every tensor of their list in place (they were once
    dropped as unused graph nodes)."""

    def bump(ts: list[torch.Tensor], xs: list[torch.Tensor]) -> torch.Tensor:
        torch._foreach_add_(ts, xs, alpha=0.5)
        torch._foreach_mul_(ts, 2.0)
        return ts[0] + 1

    compiled = magpy.compile(bump, backend="eager")
    for _ in range(3):
        ts = [torch.randn(3), torch.randn(2, 2)]
        xs = [torch.randn(3), torch.randn(2, 2)]
        mine = [t.clone() for t in ts]
        H.assert_same(compiled(mine, xs), bump(ts, xs))
        H.assert_same(mine, ts)
    assert magpy.stats(compiled).hits == 2


# ---------------------------------------------------------------------- schedules, autocast
def scheduled_step(model: nn.Module, opt: torch.optim.Optimizer, sched: Any, kind: str) -> Step:
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if kind == "autocast":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(x)
            loss = nn.functional.mse_loss(out.float(), y)
        elif kind == "lstm":
            out, _ = model(x)
            loss = nn.functional.mse_loss(out[:, -1, :4], y)
        elif kind == "mean":
            loss = (model(*x)[1].mean() - y) ** 2
        else:
            loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        return loss

    return step


def _lstm() -> nn.Module:
    torch.manual_seed(0)
    return nn.LSTM(8, 16, batch_first=True)


@pytest.mark.parametrize(
    ("kind", "backend"),
    [("adamw_steplr", "eager"), ("autocast", "eager"), ("lstm", "eager"), ("autocast", "inductor")],
)
def test_a_scheduled_learning_rate_is_a_promoted_scalar(kind: str, backend: str) -> None:
    """AdamW + StepLR + clip_grad_norm_ (also under bf16 autocast), an LSTM with RMSprop +
    StepLR: the learning rate the scheduler changes every step is a graph input, so the records
    settle (the first step's break on the optimizer's state, then two or three records)."""
    build = _lstm if kind == "lstm" else _mlp
    opt_of = OPTIMIZERS["rmsprop"] if kind == "lstm" else OPTIMIZERS["adamw_foreach"]
    runs = []
    for _ in range(2):
        model = build()
        opt = opt_of(model.parameters())
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        runs.append((model, opt, scheduled_step(model, opt, sched, kind)))
    (model, opt, mine), (reference, ref_opt, theirs) = runs
    compiled = magpy.compile(mine, backend=backend)
    g = torch.Generator().manual_seed(0)
    for i in range(12):
        shape = (4, 5, 8) if kind == "lstm" else (4, 8)
        x, y = torch.randn(*shape, generator=g), torch.randn(4, 4, generator=g)
        tol = {"rtol": 2e-2, "atol": 1e-3} if kind == "autocast" else {}  # (bf16's precision)
        H.assert_same(compiled(x, y), theirs(x, y), f"step {i}", **tol)
        H.assert_same(_state(model), _state(reference), f"model after step {i}", **tol)
        H.assert_same(_optim_state(opt), _optim_state(ref_opt), f"optimizer, step {i}", **tol)
        H.assert_same(opt.param_groups[0]["lr"], ref_opt.param_groups[0]["lr"])
        if i == 6:
            warm = magpy.stats(compiled)
    st = magpy.stats(compiled)
    assert st.records == warm.records <= 4 and st.hits - warm.hits == 5, (warm, st)
    assert st.fallbacks == 0 and st.breaks <= 1, st


def test_explain_shows_the_parts_of_a_step() -> None:
    """``magpy.explain`` of a step: one graph, no break, its forward, backward and update."""
    text = str(magpy.explain(sgd_by_hand(_mlp()))(*_inputs(_mlp(), 0)))
    assert "Graph Count: 1" in text and "Graph Break Count: 0" in text, text
    parts = [line.split(":")[0].strip() for line in text.splitlines() if line.startswith("    ")]
    assert parts == ["forward", "backward", "update"], text
    text = str(magpy.explain(accumulate_two(_mlp()))(*_inputs(_mlp(), 0)))
    parts = [line.split(":")[0].strip() for line in text.splitlines() if line.startswith("    ")]
    assert parts == ["forward", "backward", "forward", "backward", "update"], text


def _cnn_no_bias() -> nn.Module:
    """A conv without bias before its BatchNorm (as in ResNets), and Dropout, in training."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(0.2),
        nn.Flatten(), nn.Linear(4 * 6 * 6, 4),
    ).train()  # fmt: skip


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_a_cnn_with_batchnorm_dropout_and_adam(backend: str) -> None:
    """Running statistics, Dropout's random stream (equal to eager's) and Adam's state."""
    torch.manual_seed(5)
    _train(OPTIMIZERS["adam"], backend, steps=8 if backend == "eager" else 4, build=_cnn_no_bias)


def test_the_transformer_with_adamw_a_schedule_and_clipping() -> None:
    """The zoo's transformer encoder, trained with AdamW, StepLR and clip_grad_norm_."""
    runs = []
    for _ in range(2):
        model, make_inputs = load_models().MODELS["transformer"]("small")
        model.train()
        opt = OPTIMIZERS["adamw_foreach"](model.parameters())
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        runs.append((model, opt, scheduled_step(model, opt, sched, "mean"), make_inputs))
    (model, _, mine, make_inputs), (reference, _, theirs, _) = runs
    compiled = magpy.compile(mine, backend="eager")
    for i in range(12):
        x = make_inputs(2, i)
        target = torch.zeros(())
        # AdamW's bias correction is computed from its step tensor in float32 while MagPy
        # records, as under torch.compile (is_compiling() is True), not from .item() in
        # double; parameters whose gradient is zero up to rounding (attention key biases)
        # then take lr-sized steps from that noise: they are compared to lr's size
        H.assert_same(compiled(x, target), theirs(x, target), f"step {i}", rtol=1e-3)
        H.assert_same(_state(model), _state(reference), f"after step {i}", atol=2e-3)
        if i == 8:
            warm = magpy.stats(compiled)
    st = magpy.stats(compiled)
    # (the schedule's two branches, the lr and the inputs' lengths promoted: then steady)
    assert st.records == warm.records <= 6 and st.hits - warm.hits == 3, (warm, st)


def _cell_lstm() -> nn.Module:
    model, _ = load_models().MODELS["lstm"]("small")
    return model.train()


def cell_lstm_step(model: nn.Module, opt: torch.optim.Optimizer) -> Step:
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.mse_loss(model(x)[-1, :, :4], y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_an_lstm_of_cells_with_rmsprop(backend: str) -> None:
    """The zoo's LSTM built from ``nn.LSTMCell``s (one graph node per cell call): with
    Inductor, the joint trace reads the cells' weights from the graph's inputs."""
    runs = []
    for _ in range(2):
        model = _cell_lstm()
        opt = OPTIMIZERS["rmsprop"](model.parameters())
        runs.append((model, opt, cell_lstm_step(model, opt)))
    (model, _, mine), (reference, _, theirs) = runs
    compiled = magpy.compile(mine, backend=backend)
    g = torch.Generator().manual_seed(0)
    for i in range(5):
        x, y = torch.randn(6, 2, 32, generator=g), torch.randn(2, 4, generator=g)
        # (RMSprop divides by the root of its running average: Inductor's rounding of small
        # gradients grows into updates up to ~1e-4 apart at lr 0.01)
        tol = {"atol": 3e-4} if backend == "inductor" else {}
        H.assert_same(compiled(x, y), theirs(x, y), f"step {i}", **tol)
        H.assert_same(_state(model), _state(reference), f"after step {i}", **tol)
    st = magpy.stats(compiled)
    assert st.records == 1 and st.graphs == 1 and st.hits == 3, st
    records = compiled._magpy_state.records  # type: ignore[attr-defined]
    assert all(rec.uncompiled is None for rec in records), [r.uncompiled for r in records]


def scaled_step(model: nn.Module, opt: torch.optim.Optimizer, scaler: Any) -> Step:
    mse = nn.functional.mse_loss
    return H.scaled_step(model, opt, scaler, mse, device="cpu", dtype=torch.bfloat16)


def _scaler_state(scaler: Any) -> tuple[float, int]:
    return scaler.get_scale(), int(scaler._growth_tracker.item())


def test_a_grad_scaler_step_with_an_overflow() -> None:
    """``torch.amp.GradScaler`` on CPU around a bf16 step: its per-optimizer table keyed by
    ``id(optimizer)`` (a defaultdict from outside with a Python factory, replaced by every
    ``update()``), ``_amp_update_scale_`` writing both the scale and the growth tracker, and
    an overflow (an infinite target) that skips the update: the record assumes no overflow, a
    step with one runs as eager runs it."""
    model, reference = _mlp(), _mlp()
    scalers = [torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=2) for _ in "ab"]
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, reference)]
    compiled = magpy.compile(scaled_step(model, opts[0], scalers[0]), backend="eager")
    eager = scaled_step(reference, opts[1], scalers[1])
    for i in range(10):
        x, y = _inputs(model, i)
        if i == 6:
            y[0, 0] = float("inf")
        H.assert_same(compiled(x, y), eager(x, y), f"step {i}")
        H.assert_same(_state(model), _state(reference), f"model after step {i}")
        H.assert_same(_optim_state(opts[0]), _optim_state(opts[1]), f"optimizer after step {i}")
        assert _scaler_state(scalers[0]) == _scaler_state(scalers[1]), f"scaler after step {i}"
        if i == 1:
            warm = magpy.stats(compiled)
    st = magpy.stats(compiled)
    assert st.breaks == warm.breaks and st.assumption_misses == 1, (warm, st)
    assert st.hits - warm.hits == 7 and st.graphs == st.records, (warm, st)


def retained_step(model: nn.Module) -> Step:
    def step(x: torch.Tensor, y: torch.Tensor) -> Any:
        hidden = model[0](x)
        hidden.retain_grad()
        loss = nn.functional.mse_loss(model[2](model[1](hidden)), y)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
        model.zero_grad()
        return loss, hidden, hidden.grad.norm()

    return step


@pytest.mark.parametrize("backend", ["eager", pytest.param("inductor", marks=pytest.mark.inductor)])
def test_retain_grad_of_an_intermediate(backend: str) -> None:
    """``h.retain_grad()`` on a tensor of the step: the backward gives it its ``.grad`` inside
    the record (read in the step, and on the ``h`` handed out, which retains grad)."""
    model, reference = _mlp(), _mlp()
    compiled = magpy.compile(retained_step(model), backend=backend)
    eager = retained_step(reference)
    for i in range(5):
        x, y = _inputs(model, i)
        got, want = compiled(x, y), eager(x, y)
        H.assert_same(got[0], want[0], f"loss {i}")
        H.assert_same(got[2], want[2], f"norm of the retained grad {i}")
        H.assert_same(got[1].detach(), want[1].detach(), f"hidden {i}")
        H.assert_same(got[1].grad, want[1].grad, f"hidden.grad {i}")
        assert got[1].retains_grad and want[1].retains_grad
        H.assert_same(_state(model), _state(reference), f"state after step {i}")
    st = magpy.stats(compiled)
    assert (st.records, st.graphs, st.breaks, st.hits) == (1, 1, 0, 4), st


class _RNNHead(nn.Module):
    """An ``nn.LSTM`` or ``nn.GRU`` (two layers, one of them bidirectional) and a linear head."""

    def __init__(self, rnn: type[nn.RNNBase]) -> None:
        super().__init__()
        self.rnn = rnn(8, 16, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


@pytest.mark.inductor
@pytest.mark.parametrize("rnn", [nn.LSTM, nn.GRU])
def test_an_nn_rnn_trains_compiled(rnn: type[nn.RNNBase], recorded: Any) -> None:
    """``nn.LSTM`` / ``nn.GRU`` (their own fused CPU kernels in eager) in a training step with
    SGD through Inductor: the step is compiled (traced with the RNN as its cell arithmetic,
    not oneDNN's ``mkldnn_rnn_layer``, which fake tensors cannot run), no "could not be
    traced" warning; losses and parameters equal eager's over 4 steps. (SGD's update
    ``p.add_(grad, alpha=-lr)``, with the input weights' gradient one ``mm``, is the pattern
    ``test_inductor.test_alpha_of_an_add_of_a_matrix_product`` covers.)"""
    log = recorded("always")
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = _RNNHead(rnn).train()
        opt = OPTIMIZERS["sgd"](model.parameters())
        runs.append((model, optimizer_step(model, opt)))
    (model, mine), (reference, theirs) = runs
    compiled = magpy.compile(mine, backend="inductor")
    g = torch.Generator().manual_seed(0)
    for i in range(4):
        x, y = torch.randn(3, 5, 8, generator=g), torch.randn(3, 4, generator=g)
        H.assert_same(compiled(x, y), theirs(x, y), f"step {i}", atol=1e-6)
        H.assert_same(_state(model), _state(reference), f"after step {i}", atol=1e-6)
    st = magpy.stats(compiled)
    assert (st.records, st.graphs, st.breaks, st.fallbacks, st.hits) == (1, 1, 0, 0, 3), st
    records = compiled._magpy_state.records  # type: ignore[attr-defined]
    assert all(rec.uncompiled is None for rec in records), [r.uncompiled for r in records]
    warned = [str(w.message) for w in log if issubclass(w.category, magpy.MagPyWarning)]
    assert not warned, warned
