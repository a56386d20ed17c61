"""How modules are called: built inside ``forward``, with a ``forward`` of their own kind, with
their own ``__call__``, or through a built-in module's ``forward`` called directly.

- A module built and called inside ``forward``: a stateless one, or one keeping a tensor made
  deterministically from its (guarded) arguments (``Regression(n)(x)``), is inlined into one
  graph; one keeping a tensor it shares with outside state, or one drawn at random, is a break.
- ``module.forward = f`` on the instance (a weight-drop wrapper), ``self.forward =
  self.other.forward``, a ``@staticmethod`` forward, and a forward that calls the same forward
  of a child instance (recursion) are each one graph.
- A module that overrides ``__call__``: calling it runs its ``__call__``, not ``forward``.
- ``super().forward(...)`` of an ``nn.LSTM`` subclass is one graph node like the module call;
  so is an LSTM over a ``PackedSequence`` (built by following its Python ``__new__``).
- A call whose arguments its function cannot take (too many, an unknown keyword) raises
  TypeError as in eager, before any frame: a handler of the program's for it is followed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import magpy


# --------------------------------------------------------------------- modules built inside forward
class ScaledDot(nn.Module):
    def __init__(self, scale: float = 0.5) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-2, -1) * self.scale, -1)


class BuildsAModule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ScaledDot(0.25)(self.q(x), x) @ x


def test_stateless_user_module_built_in_forward_is_inlined(check: Callable[..., Any]) -> None:
    """A module without state built and called inside forward (its arguments guarded)."""
    ex = magpy.explain(BuildsAModule())(torch.randn(2, 3, 4))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), str(ex)
    check(BuildsAModule(), H.randn_inputs((2, 3, 4)), calls=4)


SHARED = torch.arange(4.0).view(1, 4, 1, 1)


class Regression(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.disp = torch.Tensor([list(range(n))]).view(1, n, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x * self.disp.data, 1, keepdim=True)


class SharedTable(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.disp = SHARED  # the module's tensor is a global one (changed between calls)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.disp


class Noise(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.noise = torch.randn(1, n, 1, 1)  # a fresh random tensor on every construction

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.noise


def regress(x: torch.Tensor, n: int) -> torch.Tensor:
    return Regression(n)(torch.softmax(x, dim=1))


def shared(x: torch.Tensor) -> torch.Tensor:
    return SharedTable()(x)


def noisy(x: torch.Tensor) -> torch.Tensor:
    return Noise(4)(x)


def test_a_module_built_in_forward_with_a_deterministic_tensor() -> None:
    """A module built inside forward keeps a tensor made from its (guarded) arguments: the
    tensor is rebuilt by the graph, one graph serves every call."""
    compiled = magpy.compile(regress, backend="eager")
    for _ in range(3):
        x = torch.randn(2, 4, 3, 3)
        H.assert_same(compiled(x, 4), regress(x, 4))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 2, 0, 0), st
    assert H.graphs(regress, torch.randn(2, 4, 3, 3), 4) == (1, [])
    x = torch.randn(2, 3, 3, 3)  # another n: another record
    H.assert_same(compiled(x, 3), regress(x, 3))
    assert magpy.stats(compiled).records == 2


def graph_tensor_argument(x: torch.Tensor) -> torch.Tensor:
    # (the module keeps a tensor of the graph, read back)
    return torch.nn.ReLU(x * 2).inplace + 1


def returns_the_module(x: torch.Tensor) -> Any:
    # (yoloair's ``return nn.ReLU(self.shuf(x2))``: the module itself is the result)
    return torch.nn.ReLU(x * 2)


def returns_it_changed(x: torch.Tensor) -> Any:
    r = torch.nn.ReLU(inplace=x.relu())
    r.tag = "changed"
    return r, r.training


def calls_it(x: torch.Tensor) -> torch.Tensor:
    # (``F.relu(x, inplace=<tensor>)`` branches on the tensor: calling it is a break)
    return torch.nn.ReLU(x.sum() > 0)(x.clone()) + 1


def _module_view(out: Any) -> Any:
    """What eager's result is, modules included (type, attributes; tensors compared)."""
    if isinstance(out, tuple):
        return tuple(_module_view(o) for o in out)
    if isinstance(out, torch.nn.Module):
        kept = {k: v for k, v in vars(out).items() if not k.startswith("_")}
        return (type(out), id(out), {k: _module_view(v) for k, v in kept.items()})
    return out


def _without_ids(view: Any) -> Any:
    if type(view) is tuple:
        return tuple(_without_ids(v) for v in view if type(v) is not int)
    return view


@pytest.mark.parametrize(
    ("fn", "one_graph"),
    [
        (graph_tensor_argument, True),
        (returns_the_module, True),
        (returns_it_changed, True),
        (calls_it, False),
    ],
)
def test_a_library_module_built_from_a_tensor_of_the_graph(fn: Any, one_graph: bool) -> None:
    """``nn.ReLU(t)`` with ``t`` a tensor of the graph: a new module on every call, which the
    mock builds again from that call's tensor (eager's type, attributes, a new object each
    time), so the call is one graph; calling such a module is a break. Equal to eager on every
    call, fresh inputs."""
    _, reasons = H.graphs(fn, torch.randn(2, 4, 3, 3))
    assert (reasons == []) is one_graph, reasons
    compiled = magpy.compile(fn, backend="eager")
    modules: list[Any] = []  # (held: a new module on every call, never one handed out before)
    for i in range(4):
        x = torch.randn(2, 4, 3, 3) * (-1) ** i
        out = compiled(x)
        new = [o for o in (out if isinstance(out, tuple) else (out,)) if isinstance(o, nn.Module)]
        assert not any(o is p for o in new for p in modules), "the same module handed out twice"
        modules += new
        H.assert_same(
            _without_ids(_module_view(out)), _without_ids(_module_view(fn(x))), f"call {i}"
        )
    st = magpy.stats(compiled)
    assert st.fallbacks == 0, st
    if one_graph:
        assert (st.records, st.hits, st.breaks) == (1, 3, 0), st


@pytest.mark.parametrize(
    ("fn", "reason"),
    [
        (shared, "SharedTable.disp: a tensor a module built inside forward keeps"),
        (noisy, "Noise draws random numbers when built inside forward"),
    ],
)
def test_a_module_built_in_forward_with_other_tensors_breaks(fn: Any, reason: str) -> None:
    """A tensor the module shares with outside state, or drawn at random, is not a constant of
    the record: a break, and every call equals eager."""
    _, reasons = H.graphs(fn, torch.randn(2, 4, 3, 3))
    assert any(r.startswith(reason) for r in reasons), reasons
    compiled = magpy.compile(fn, backend="eager")
    for i in range(3):
        x = torch.randn(2, 4, 3, 3)
        torch.manual_seed(i)
        got = compiled(x)
        torch.manual_seed(i)
        H.assert_same(got, fn(x))
        SHARED.add_(1)
    assert magpy.stats(compiled).fallbacks == 0


# ------------------------------------------- forward on the instance, static and recursive forwards
def weight_drop(module: torch.nn.Module, p: float) -> None:
    raw = module.weight
    del module._parameters["weight"]
    module.register_parameter("weight_raw", torch.nn.Parameter(raw.detach().clone()))
    original = module.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        w = F.dropout(module.weight_raw, p=p, training=module.training)
        module.weight = w
        return original(*args, **kwargs)

    module.forward = forward


class Wrapper(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)
        self.other = torch.nn.Linear(4, 4)
        self.forward = self.other.forward  # type: ignore[method-assign]  (a bound method)


def _dropped_linear() -> torch.nn.Linear:
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)
    weight_drop(lin, 0.5)
    return lin.eval()


def test_a_module_whose_instance_holds_its_forward() -> None:
    """``module.forward = f`` on the instance: ``module(x)`` calls ``f(x)``; the function is
    guarded by identity and the attribute it writes is written back on a hit."""
    got_mod, want_mod = _dropped_linear(), _dropped_linear()
    compiled = magpy.compile(got_mod, backend="eager")
    for _ in range(3):
        x = torch.randn(2, 4)
        H.assert_same(compiled(x), want_mod(x))
        H.assert_same(got_mod.weight, want_mod.weight)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 2, 0, 0), st
    assert H.graphs(_dropped_linear(), torch.randn(2, 4)) == (1, [])
    got_mod.forward = lambda x: x * 3  # another forward: the guard misses
    want_mod.forward = lambda x: x * 3
    x = torch.randn(2, 4)
    H.assert_same(compiled(x), want_mod(x))
    assert magpy.stats(compiled).records == 2


def test_a_module_whose_forward_is_another_modules_bound_method() -> None:
    """``self.forward = self.other.forward``: calling the module runs ``other``'s forward."""
    mod = Wrapper().eval()
    compiled = magpy.compile(mod, backend="eager")
    for _ in range(3):
        x = torch.randn(2, 4)
        H.assert_same(compiled(x), mod(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 2, 0, 0), st


class StaticForward(nn.Module):
    """yolov5's activations: ``forward`` is a ``@staticmethod``."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x * F.softplus(x).tanh()


class UsesStaticForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = StaticForward()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x) + 1


@pytest.mark.parametrize("make", [StaticForward, UsesStaticForward], ids=["root", "child"])
def test_static_forward_is_called_without_the_module(
    make: Callable[[], nn.Module], check: Callable[..., Any]
) -> None:
    """A ``@staticmethod`` forward takes no ``self``; explain leaves its entry site behind."""
    ex = magpy.explain(make())(torch.randn(2, 3))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), str(ex)
    check(make(), H.randn_inputs((2, 3)), calls=4)


class Nested(nn.Module):
    """Hourglass-style recursion: forward calls the same forward of a child instance."""

    def __init__(self, depth: int) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.inner = Nested(depth - 1) if depth > 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if self.inner is not None:
            y = y + self.inner(y)
        return y.relu()


def test_recursive_forward_is_one_graph(check: Callable[..., Any]) -> None:
    """explain gives the target's code an entry site; reaching it again through recursion must
    not cut the graph (compile never did)."""
    ex = magpy.explain(Nested(3))(torch.randn(2, 4))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), str(ex)
    check(Nested(3), H.randn_inputs((2, 4)), calls=4)


# ------------------------------------------------------------------- a module with its own __call__
class CallNorm(torch.nn.Module):
    """CartoonGAN's InstanceNormalization: a module that overrides ``__call__`` itself."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.rand(dim))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        mean = x.mean(-1, keepdim=True)
        return (x - mean) * self.scale


class UsesCallNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.norm = CallNorm(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.lin(x)))


def test_a_module_with_its_own_call(check: Any) -> None:
    """Calling it runs its ``__call__`` (followed), not ``forward``
    (``_forward_unimplemented``, which the monitor expected and never saw)."""
    check(UsesCallNorm(), lambda i: ((torch.randn(2, 4),), {}), calls=3)
    assert H.graphs(UsesCallNorm(), torch.randn(2, 4)) == (1, [])


# ------------------------------------------ recurrent modules: super().forward and packed sequences
class ProjectedLSTM(torch.nn.LSTM):
    """pytorch_forecasting's LSTM/GRU: a subclass whose forward calls ``super().forward``."""

    def __init__(self) -> None:
        super().__init__(4, 8, batch_first=True)
        self.proj = torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor, hx: Any = None) -> Any:  # type: ignore[override]
        out, (h, _c) = super().forward(x * 2, hx)
        return self.proj(out), h


def test_super_forward_of_an_lstm_is_one_node(check: Any) -> None:
    """``nn.LSTM.forward`` called on the module (not through ``__call__``) is recorded as one
    graph node like the module call, instead of following its weight bookkeeping (weakrefs)."""
    check(ProjectedLSTM(), H.randn_inputs((2, 5, 4)), calls=3)
    assert H.graphs(ProjectedLSTM(), torch.randn(2, 5, 4)) == (1, [])


class PackedEncoder(torch.nn.Module):
    """StackPropagation-SLU's encoder: pack, a bidirectional LSTM, unpack, cut each row."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(4, 3, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor, lens: Any) -> torch.Tensor:
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lens, batch_first=True)
        hidden, _ = self.lstm(packed)
        padded, _ = torch.nn.utils.rnn.pad_packed_sequence(hidden, batch_first=True)
        return torch.cat([padded[i][: lens[i], :] for i in range(len(lens))], dim=0)


def packed(x: torch.Tensor, lens: list[int]) -> Any:
    return torch.nn.utils.rnn.pack_padded_sequence(x * 2, lens, batch_first=True)


def test_packed_sequences(check: Any) -> None:
    """``PackedSequence`` (a namedtuple with a Python ``__new__``) is built by following its
    ``__new__`` down to ``tuple.__new__``; an LSTM over it is one node that gets it rebuilt;
    lengths as a list are guarded, as a tensor they stay in the graph."""
    as_list = lambda i: ((torch.rand(4, 4, 4), [4, 3, 2, 2]), {})  # noqa: E731
    as_tensor = lambda i: ((torch.rand(4, 4, 4), torch.tensor([4, 3, 2, 2])), {})  # noqa: E731
    check(PackedEncoder(), as_list, calls=3)
    check(PackedEncoder(), as_tensor, calls=3)
    assert H.graphs(PackedEncoder(), *as_tensor(0)[0]) == (1, [])
    out = check(packed, as_list, calls=3)(torch.rand(4, 4, 4), [4, 3, 2, 2])
    assert type(out) is torch.nn.utils.rnn.PackedSequence and out.unsorted_indices is None


class TwoCells(nn.Module):
    """Cells of each kind, a state given or not, batched or one sample."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm, self.gru, self.rnn = nn.LSTMCell(4, 6), nn.GRUCell(6, 6), nn.RNNCell(6, 3)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        h1, c1 = self.lstm(x, (h, h * 0.5))
        return self.rnn(self.gru(h1 + c1)) + self.rnn(self.gru(h1), None).sum()


@pytest.mark.parametrize("batch", [(3,), ()])
def test_rnn_cells_are_followed_into_one_graph(check: Any, batch: tuple[int, ...]) -> None:
    """``nn.LSTMCell``/``GRUCell``/``RNNCell`` are followed to their one ``torch.lstm_cell``-like
    call: no node closes over the module (so AOTAutograd's cache keys the graph), the weights
    are graph inputs, and a weight replaced between calls is caught."""
    model = TwoCells()
    check(model, H.randn_inputs((*batch, 4), (*batch, 6)), calls=3)
    compiled = magpy.compile(model, backend="eager")
    x, h = torch.randn(*batch, 4), torch.randn(*batch, 6)
    H.assert_same(compiled(x, h), model(x, h))
    (rec,) = compiled._magpy_state.records
    targets = {n.target for n in rec.graph_module.graph.nodes if n.op == "call_function"}
    assert {torch.lstm_cell, torch.gru_cell, torch.rnn_tanh_cell} <= targets, targets
    assert not [t for t in targets if getattr(t, "_magpy_module", None) is not None], targets
    model.gru.weight_hh = nn.Parameter(torch.randn(18, 6))
    H.assert_same(compiled(x, h), model(x, h))


# --------------------------------------------------------------------- calls that cannot bind
class TriesState(nn.Module):
    """torchbearer's ``_CAMWrapper``: ``base(x, state)``, and on TypeError ``base(x)``."""

    def __init__(self, base: nn.Module) -> None:
        super().__init__()
        self.base = base
        self.p = nn.Parameter(torch.randn(3))

    def forward(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        try:
            return self.base(self.p.sigmoid() * x, state)
        except TypeError as exc:
            return self.base(self.p.sigmoid() * x) + len(str(exc))


def _helper(a: torch.Tensor, b: float = 1.0) -> torch.Tensor:
    return a * b


def bad_keyword(x: torch.Tensor) -> torch.Tensor:
    try:
        return _helper(x, c=3.0)  # type: ignore[call-arg]
    except TypeError as exc:
        return _helper(x, 2.0) + len(exc.args[0])


def too_many(x: torch.Tensor) -> torch.Tensor:
    return _helper(x, 2.0, 3.0)  # type: ignore[call-arg]


def _two(i: int) -> H.Inputs:
    return (torch.randn(3), torch.randn(3)), {}


class _Two(nn.Module):
    def forward(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return x * state


@pytest.mark.parametrize("make", [nn.ReLU, _Two], ids=["ReLU", "takes-two"])
def test_a_call_with_too_many_arguments_raises_into_the_programs_handler(
    check: Any, make: Any
) -> None:
    """``ReLU.forward`` called with two arguments raises TypeError natively (the monitor does
    not start its frame); the ``except TypeError`` path is one graph (it was a break). A base
    that takes both arguments: no exception, the ``try`` path."""
    mod = TriesState(make())
    assert H.graphs(mod, *_two(0)[0]) == (1, [])
    check(mod, _two, calls=4)


def test_an_unknown_keyword_raises_into_the_programs_handler(check: Any) -> None:
    assert H.graphs(bad_keyword, torch.randn(3)) == (1, [])
    check(bad_keyword, H.randn_inputs((3,)), calls=4)


def test_a_call_that_cannot_bind_and_is_not_caught_raises_as_eager() -> None:
    compiled = magpy.compile(too_many, backend="eager")
    for _ in range(3):
        with pytest.raises(TypeError) as got:
            compiled(torch.randn(3))
        with pytest.raises(TypeError) as want:
            too_many(torch.randn(3))
        assert str(got.value) == str(want.value)
    assert H.counters(compiled)[2:] == (0, 0)
