"""``with`` blocks on context managers other than grad mode, and module hooks that are objects.

Context managers written in Python (a class with ``__enter__``/``__exit__``, ``contextlib``'s
``nullcontext``/``suppress``/``contextmanager``) are followed like inlined calls, ``__exit__``
included (also on a ``return`` inside the block). ``record_function`` and a disabled
``torch.autocast`` are modelled. A forward pre-hook that is an object with a Python ``__call__``
(``nn.utils.weight_norm``, ``nn.utils.spectral_norm``) is followed like a function hook, and
hooks registered ``with_kwargs=True`` get the call's kwargs as in ``_call_impl``. Each
case compares compiled with eager over several calls and counts records, hits and breaks.

``warnings.catch_warnings()`` blocks are in ``test_warnings.py``; ``t.requires_grad = flag`` in
``test_tensor_attributes.py``.
"""

from __future__ import annotations

import contextlib
import select
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import _integration_helpers as H
import pytest
import torch
from torch import nn

import magpy


def _one_tensor(*shape: int) -> Callable[[int], H.Inputs]:
    return H.randn_inputs(shape)


def _reasons(fn: Any, *args: Any) -> list[str]:
    explained = magpy.explain(fn)(*args)
    return [str(r.reason) for r in explained.break_reasons]


# ---------------------------------------------------------------------- Python context managers
class Scale:
    """A context manager written in Python that keeps state on itself."""

    def __init__(self, k: float) -> None:
        self.k = k
        self.depth = 0
        self.exits = 0

    def __enter__(self) -> Scale:
        self.depth += 1
        return self

    def __exit__(self, *exc: object) -> bool:
        self.depth -= 1
        self.exits += 1
        return False


def made_in_forward(x: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    with Scale(2.0) as s:
        y = x * s.k
    return y, s.depth, s.exits


def return_inside(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    s = Scale(3.0)
    with s:
        return x * s.k + s.depth, s.exits


class HoldsContext(nn.Module):
    """An entry object used as a context manager: its state changes are written back."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.ctx = Scale(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with self.ctx as c:
            y = self.lin(x) * c.k
        return y


@pytest.mark.parametrize("fn", [made_in_forward, return_inside], ids=lambda f: f.__name__)
def test_python_context_manager_is_followed(check: Any, fn: Any) -> None:
    """__enter__ and __exit__ (also before a return inside the block) are inlined."""
    check(fn, _one_tensor(3), calls=3)


def test_entry_context_manager_state_is_written_back(check: Any) -> None:
    """__enter__/__exit__ writes to an entry object are replayed by the mock; state the block
    changes but does not read does not stop the cache from hitting."""
    mod = HoldsContext()
    check(mod, _one_tensor(2, 3), calls=4)
    assert (mod.ctx.exits, mod.ctx.depth) == (4, 0)


def break_inside_block(x: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    with Scale(2.0) as s:
        y = x * s.k
        # a graph break inside the block: native code without an annotation (``y.sum().numpy()``
        # was the example; an array of tensor values nobody uses no longer breaks)
        select.select([], [], [], 0)
        y = y + 1
    return y, s.depth, s.exits


def test_break_inside_a_python_context_manager() -> None:
    """The mock rebuilds the object made in the run and its bound __exit__ for the frame that
    resumes inside the block."""
    reasons = _reasons(break_inside_block, torch.randn(3))
    assert len(reasons) == 1 and "select.select" in reasons[0], reasons
    magpy.reset()
    compiled = magpy.compile(break_inside_block, backend="eager")
    for _ in range(4):
        x = torch.randn(3)
        H.assert_same(compiled(x), break_inside_block(x))
    st = magpy.stats(compiled)
    assert (st.graphs, st.fallbacks) == (2, 0) and st.hits >= 4, st


def raises_inside(x: torch.Tensor, ctx: Scale) -> torch.Tensor:
    with ctx:
        y = x + 1
        if y.shape[0] == 3:
            raise ValueError("raised inside the block")
    return y


def test_exception_inside_block_passes_through() -> None:
    """The program's exception reaches the caller unchanged and __exit__ ran, as eagerly."""
    compiled = magpy.compile(raises_inside, backend="eager")
    for _ in range(2):
        mine, theirs = Scale(1.0), Scale(1.0)
        with pytest.raises(ValueError, match="raised inside the block"):
            compiled(torch.randn(3), mine)
        with pytest.raises(ValueError, match="raised inside the block"):
            raises_inside(torch.randn(3), theirs)
        assert (mine.depth, mine.exits) == (theirs.depth, theirs.exits) == (0, 1)
    assert magpy.stats(compiled).fallbacks == 0


# ---------------------------------------------------------------------- contextlib
LOG: list[str] = []


@contextlib.contextmanager
def doubled(s: float) -> Iterator[float]:
    LOG.append("enter")
    yield s * 2
    LOG.append("exit")


def with_contextmanager(x: torch.Tensor) -> torch.Tensor:
    with doubled(1.5) as k:
        y = x * k
    return y


def with_nullcontext(x: torch.Tensor) -> torch.Tensor:
    with contextlib.nullcontext(3.0) as k:
        y = x * k
    return y


def with_suppress(x: torch.Tensor) -> torch.Tensor:
    with contextlib.suppress(KeyError):
        y = x * 2
    return y


@pytest.mark.parametrize(
    "fn", [with_contextmanager, with_nullcontext, with_suppress], ids=lambda f: f.__name__
)
def test_contextlib_managers_are_one_graph(check: Any, fn: Any) -> None:
    """contextmanager generators, nullcontext and suppress (no exception) are followed."""
    LOG.clear()
    check(fn, _one_tensor(3), calls=3)
    if fn is with_contextmanager:  # the generator's effects happen on every call, hits too
        assert LOG == ["enter", "exit"] * 6


def suppressed(x: torch.Tensor, d: dict[str, float]) -> torch.Tensor:
    y = x
    with contextlib.suppress(KeyError):
        y = x * d["missing"]
    return y + 1


def test_suppress_with_an_exception_is_followed(check: Any) -> None:
    """An exception inside the block calls ``suppress.__exit__`` with it (followed, as the
    ``KeyError`` of the missing key is guarded): one graph, and the exception is swallowed."""
    assert _reasons(suppressed, torch.randn(3), {}) == []
    check(suppressed, lambda i: ((torch.randn(3), {}), {}), calls=3)


# ---------------------------------------------------------------------- torch contexts
def labelled(x: torch.Tensor) -> torch.Tensor:
    with torch.profiler.record_function("magpy-block"):
        y = x * 2
    return y + 1


def test_record_function_is_a_no_op_while_the_profiler_is_off(check: Any) -> None:
    """record_function labels profiler events: nothing to record while no profiler runs."""
    compiled = check(labelled, _one_tensor(3), calls=3)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        H.assert_same(compiled(torch.ones(3)), torch.full((3,), 3.0))
    names = {e.key for e in prof.key_averages()}
    assert "magpy-block" in names  # the guard on the profiler sent this call down another path


def autocast_off(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", enabled=False):
        y = x @ w
    return y.float() + 1


def test_disabled_autocast_is_entered_in_the_graph(check: Any) -> None:
    """A disabled autocast block is entered and left by graph nodes: its operations run with
    autocast off even when the caller's autocast is on."""
    compiled = check(autocast_off, H.randn_inputs((2, 3), (3, 4)), calls=3)
    x, w = torch.randn(2, 3), torch.randn(3, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = autocast_off(x, w)
        got = compiled(x, w)
    assert want.dtype == torch.float32
    H.assert_same(got, want)


def cuda_autocast_off(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    with torch.cuda.amp.autocast(enabled=False):
        return x @ w


def test_deprecated_cuda_autocast_disabled() -> None:
    """torch.cuda.amp.autocast(enabled=False) (deprecated, so it warns) on a CPU program.

    Its constructor warns on every call, in code the monitor does not follow: a record would not
    warn again, so the call is a graph break and runs natively each time (issue 35: a warning
    is shown on every call as eager shows it, under the program's filters); the rest hits."""
    x, w = torch.randn(2, 3), torch.randn(3, 4)

    def run(fn: Any) -> tuple[list[torch.Tensor], list[tuple[Any, ...]]]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outs = [fn(x, w) for _ in range(4)]
        return outs, [(c.category, str(c.message), c.filename, c.lineno) for c in caught]

    want_outs, want_warnings = run(cuda_autocast_off)
    compiled = magpy.compile(cuda_autocast_off, backend="eager")
    got_outs, got_warnings = run(compiled)
    H.assert_same(got_outs, want_outs)
    assert len(want_warnings) == 4 and got_warnings == want_warnings
    st = magpy.stats(compiled)
    assert st.hits >= 1 and st.fallbacks == 0, st


def autocast_on(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
    return y.float()


def test_enabled_autocast_is_one_graph(check: Any) -> None:
    """An enabled ``torch.autocast`` block is entered and left by nodes of the graph: its
    matmul runs in bfloat16 as in eager, whatever the caller's autocast state."""
    check(autocast_on, H.randn_inputs((2, 3), (3, 4)), calls=3)
    assert not _reasons(autocast_on, torch.randn(2, 3), torch.randn(3, 4))


# ---------------------------------------------------------------------- hooks that are objects
def _quiet(build: Callable[[], nn.Module]) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.nn.utils.weight_norm
        return build()


class WeightNormed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.utils.weight_norm(nn.Conv1d(2, 4, 3, padding=1))
        self.lin = nn.utils.weight_norm(nn.Linear(8, 5), dim=None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(torch.relu(self.conv(x)).flatten(1)[:, :8])


def test_weight_norm_hook_object_is_followed() -> None:
    """WeightNorm's pre-hook recomputes ``module.weight`` on every call; the mock sets it.

    (A weight-normed module cannot be deep-copied: the eager twin is built from the same seed.)
    """
    torch.manual_seed(0)
    mod = _quiet(WeightNormed)
    torch.manual_seed(0)
    ref = _quiet(WeightNormed)
    compiled = magpy.compile(mod, backend="eager")
    for i in range(4):
        if i == 2:  # a new weight_g must be seen by the next call
            with torch.no_grad():
                mod.conv.weight_g.mul_(2)
                ref.conv.weight_g.mul_(2)
        x = torch.randn(2, 2, 6)
        H.assert_same(compiled(x), ref(x))
        for a, b in ((mod.conv, ref.conv), (mod.lin, ref.lin)):
            assert "weight" in vars(a) and "weight" not in a._parameters
            H.assert_same(a.weight, b.weight)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 3, 0, 0), st


@pytest.mark.parametrize("training", [True, False])
def test_spectral_norm_power_iteration_updates_buffers(check: Any, training: bool) -> None:
    """SpectralNorm's pre-hook updates ``weight_u``/``weight_v`` in place while training."""
    mod = _quiet(lambda: nn.Sequential(nn.utils.spectral_norm(nn.Linear(4, 3)), nn.Tanh()))
    mod.train(training)
    u0 = mod[0].weight_u.clone()
    check(mod, _one_tensor(2, 4), calls=4)
    assert torch.equal(mod[0].weight_u, u0) is not training


class Shift:
    """A hook object whose class defines ``__call__`` in Python."""

    def __init__(self, by: float) -> None:
        self.by = by

    def __call__(self, module: nn.Module, args: tuple[Any, ...], *out: Any) -> Any:
        if out:
            return out[0] * self.by
        return (args[0] + self.by,)


def test_hook_objects_with_python_call(check: Any) -> None:
    """Pre- and post-hooks that are objects with a Python ``__call__``."""
    lin = nn.Linear(3, 3)
    lin.register_forward_pre_hook(Shift(1.0))
    lin.register_forward_hook(Shift(2.0))
    check(nn.Sequential(lin, nn.ReLU()), _one_tensor(2, 3), calls=3)


# ---------------------------------------------------------------------- hooks with kwargs
def _scale_kwarg(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A ``with_kwargs`` pre-hook: new args and kwargs (a kwarg added, one changed)."""
    return (args[0] * 2,), {**kwargs, "scale": kwargs.get("scale", 1.0) + 1.0}


def _note_kwarg(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    kwargs["shift"] = 0.5  # (in place: forward gets the same dict)


def _post_kwarg(module: nn.Module, args: Any, kwargs: dict[str, Any], out: torch.Tensor) -> Any:
    return out + args[0].sum() * kwargs["scale"]


class KwLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
        return self.lin(x) * scale + shift


class CallsKwLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = KwLayer()
        for hook in (_scale_kwarg, _note_kwarg, _scale_kwarg):  # (each sees the last's kwargs)
            self.layer.register_forward_pre_hook(hook, with_kwargs=True)
        self.layer.register_forward_hook(_post_kwarg, with_kwargs=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x, scale=3.0).relu() + self.layer(x)


def test_forward_hooks_with_kwargs_are_followed(check: Any) -> None:
    """Hooks registered ``with_kwargs=True`` get the call's kwargs (a pre-hook may return new
    args and kwargs, or change the dict in place; a forward hook reads them): one graph, equal
    to eager (they were a break)."""
    model = CallsKwLayer()
    assert _reasons(model, torch.randn(2, 3)) == []
    check(model, _one_tensor(2, 3), calls=4)


def test_a_hook_registered_with_kwargs_later_is_a_miss() -> None:
    """Which hooks take kwargs is guarded: a with_kwargs hook added after the record misses."""
    model, ref = CallsKwLayer(), CallsKwLayer()
    ref.load_state_dict(model.state_dict())
    compiled = magpy.compile(model, backend="eager")
    for i in range(5):
        if i == 3:
            for m in (model, ref):
                m.layer.register_forward_pre_hook(_scale_kwarg, with_kwargs=True)
        x = torch.randn(2, 3)
        H.assert_same(compiled(x), ref(x), f"call {i}")
    assert H.counters(compiled) == (2, 3, 0, 0)


class LazyTower(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.LazyLinear(4)
        # (another pre-hook before the initialising one: the monitor does not run both natively)
        self.lin.register_forward_pre_hook(lambda m, a: None, prepend=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).relu()


def test_a_lazy_modules_initialisation_is_a_break_with_its_reason() -> None:
    """``nn.LazyLinear``'s with_kwargs pre-hook materializes its parameters in place (their
    class and data swapped) and removes itself. Alone, it runs natively and the call is
    recorded as the module is from then on (test_lazy_init.py); after another pre-hook it is a
    break that says so (the next call is captured whole), never a silent difference."""
    torch.manual_seed(0)
    reasons = _reasons(LazyTower(), torch.randn(2, 3))
    assert reasons == ["LazyLinear initialises its lazy parameters"], reasons
