"""End-to-end tests of the static path (one graph, no break) with ``backend="eager"``.

Every program runs eagerly and compiled on fresh inputs; outputs, inputs changed in place,
module state and output aliasing must equal eager's, and from the second call on the cache
must hit without running a line of the user's Python (checked with a ``sys.settrace`` counter).
Also the user API around it: ``explain``, ``fullgraph``, argument errors, user exceptions,
logging, ``reset``, ``max_records``, decorator forms and compiled modules.

Modules built inside ``forward``, static and recursive forwards: ``test_module_calls.py``.
Guards on autocast, the default dtype and inference mode: ``test_global_state.py``.
"""

from __future__ import annotations

import copy
import inspect
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import magpy
from magpy_refgraph import MagPyError

CONFORMANCE_STATIC = [
    "c_convnet",
    "c_attention_with_mask",
    "c_tiny_gpt",
    "c_module_attribute_side_effects",
    "c_inplace_on_inputs",
]


def line_of(fn: Any, needle: str) -> int:
    """The line number of the first line of ``fn``'s source that contains ``needle``."""
    lines, first = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if needle in line:
            return first + i
    raise AssertionError(f"{needle!r} not in the source of {fn!r}")


# ---------- user programs
class MLP(nn.Module):
    def __init__(self, d_in: int = 8, d_hidden: int = 32, d_out: int = 4) -> None:
        super().__init__()
        self.l1 = nn.Linear(d_in, d_hidden)
        self.l2 = nn.Linear(d_hidden, d_hidden)
        self.l3 = nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.l1(x))
        x = torch.tanh(self.l2(x)) + x
        return self.l3(x)


class BNNet(nn.Module):
    """A small CNN with BatchNorm and Dropout (p=0, so train mode stays deterministic)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2)
        self.bn2 = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(p=0.0)
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.drop(x.mean(dim=(2, 3)))
        return self.fc(x)


class Scaled(nn.Module):
    """Reads a plain Python attribute: its value is guarded and baked into the graph."""

    def __init__(self, scale: float = 2.0) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale


def returns_containers(x: torch.Tensor, y: torch.Tensor) -> tuple[dict[str, Any], int]:
    s = x @ y
    return {"sum": s, "pair": (s.relu(), x - 1), "n": x.shape[0]}, x.shape[1] * 2


def returns_input(x: torch.Tensor) -> torch.Tensor:
    return x


def returns_input_and_product(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x * w
    return x, y, x


def returns_input_after_dead_op(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    del y
    return x


def _scale_helper(x: torch.Tensor, k: float) -> torch.Tensor:
    return x * k + 1


def calls_helper(x: torch.Tensor) -> torch.Tensor:
    return _scale_helper(x.sin(), 3.0).sum(dim=-1)


def affine(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def prints(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    print("y computed")
    return y * 2


def reads_values(x: torch.Tensor) -> torch.Tensor:
    y = x.sum()
    if y.numpy() > 0:  # a value read that stays a break (.item() is assumed: test_speculation)
        return x
    return -x


class UserError(Exception):
    """The user's own exception type."""


def raises_on_odd_rows(x: torch.Tensor) -> torch.Tensor:
    y = x.relu()
    if x.shape[0] % 2:
        raise UserError(f"odd number of rows: {x.shape[0]}")
    return y


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a @ b).relu()


# ---------- (a) eager equality
@pytest.mark.parametrize("name", CONFORMANCE_STATIC)
def test_conformance_program_equals_eager_and_hits(
    name: str, programs: Any, check: Callable[..., Any]
) -> None:
    """A static conformance program: compiled equals eager, 1 record, every later call hits."""
    spec = programs.CASES[name]
    torch.manual_seed(0)
    fn, make = spec["build"]()
    # check() also compares the module's plain attributes after every call, which covers the
    # outside state that spec["effects"] snapshots (Counter.calls and .last_shape).
    check(fn, make, calls=max(spec["calls"], 4))


def test_mlp(check: Callable[..., Any]) -> None:
    """An MLP: equal to eager on fresh inputs, one record, then only hits."""
    check(MLP(), H.randn_inputs((5, 8)), calls=5)


def test_cnn_batchnorm_eval(check: Callable[..., Any]) -> None:
    """A CNN with BatchNorm in eval mode (running stats are read, never written)."""
    check(BNNet().eval(), H.randn_inputs((2, 3, 12, 12)), calls=4)


def test_cnn_batchnorm_train_updates_running_stats_like_eager(check: Callable[..., Any]) -> None:
    """In train mode BatchNorm updates running_mean/var/num_batches_tracked on hits too."""
    net = BNNet().train()
    check(net, H.randn_inputs((4, 3, 12, 12)), calls=4)
    assert int(net.bn1.num_batches_tracked) == 4
    assert not torch.equal(net.bn1.running_mean, torch.zeros(8))


def test_returns_dict_tuple_and_python_int(check: Callable[..., Any]) -> None:
    """Nested dict/tuple outputs with tensors and Python ints keep eager's structure."""
    compiled = check(returns_containers, H.randn_inputs((3, 5), (5, 2)), calls=4)
    out, n = compiled(torch.randn(3, 5), torch.randn(5, 2))
    assert type(out) is dict and type(out["pair"]) is tuple
    assert type(n) is int and n == 10 and out["n"] == 3


def test_returns_its_input_tensor_identity() -> None:
    """A function returning its argument returns that very object (``out is x``) on hits too."""
    compiled = magpy.compile(returns_input, backend="eager")
    for _ in range(3):
        x = torch.randn(4)
        assert compiled(x) is x
    st = magpy.stats(compiled)
    assert (st.records, st.hits) == (1, 2)


def test_returns_input_next_to_a_graph_output(check: Callable[..., Any]) -> None:
    """``return x, x * w, x``: both ``x`` are the input object, next to a fresh tensor."""
    compiled = check(returns_input_and_product, H.randn_inputs((4,), (4,)), calls=3)
    x, w = torch.randn(4), torch.randn(4)
    a, y, b = compiled(x, w)
    assert a is x and b is x and y is not x


def test_returns_input_through_check(check: Callable[..., Any]) -> None:
    """The aliasing signature (output is input 0) matches eager on every call."""
    check(returns_input, H.randn_inputs((4,)), calls=3)


def test_returns_input_after_a_dead_op(check: Callable[..., Any]) -> None:
    """A dead tensor op before ``return x`` does not break the hit path."""
    check(returns_input_after_dead_op, H.randn_inputs((4,)), calls=3)


def test_module_attribute_read(check: Callable[..., Any]) -> None:
    """``self.scale`` is read into the graph; equal to eager, one record."""
    check(Scaled(2.5), H.randn_inputs((3, 4)), calls=4)


def test_inlined_user_helper(check: Callable[..., Any]) -> None:
    """A call into another user function is inlined; its frame does not run on hits."""
    check(calls_helper, H.randn_inputs((3, 6)), calls=4)


def test_keyword_tensor_arguments(programs: Any, check: Callable[..., Any]) -> None:
    """Keyword tensor arguments (the attention mask) are guarded and passed like positionals."""
    fn, make = programs.CASES["c_attention_with_mask"]["build"]()

    def make_kw(i: int) -> H.Inputs:
        (x,), kw = make(i)
        return [], {"x": x, **kw}

    check(fn, make_kw, calls=3)


def test_autograd_through_compiled_module() -> None:
    """Gradients of parameters through the compiled module equal eager's, call after call."""
    torch.manual_seed(0)
    net = MLP()
    ref = copy.deepcopy(net)
    compiled = magpy.compile(net, backend="eager")
    for i in range(3):
        x = torch.randn(6, 8, generator=torch.Generator().manual_seed(i))
        compiled(x).square().mean().backward()
        ref(x).square().mean().backward()
        for (name, p), q in zip(net.named_parameters(), ref.parameters(), strict=True):
            H.assert_same(p.grad, q.grad, f"call {i}: {name}.grad")
    assert (magpy.stats(compiled).records, magpy.stats(compiled).hits) == (1, 2)


# ---------- (b) hits run no user code
def test_second_call_runs_no_user_python() -> None:
    """On the second call (a hit) no frame and no line of the user's forward runs."""
    net = MLP()
    compiled = magpy.compile(net, backend="eager")
    files = H.user_code_files(net)
    assert files == {__file__}
    x = torch.randn(5, 8)
    with H.count_user_code(files) as eager_seen:  # the counter does see the user's code
        want = net(x)
    assert eager_seen.calls == ["MLP.forward:" + str(MLP.forward.__code__.co_firstlineno)]
    assert eager_seen.lines >= 3

    compiled(x)  # miss: monitored, records
    before = sys.gettrace()
    with H.count_user_code(files) as seen:
        got = compiled(x)
    assert sys.gettrace() is before
    assert seen.tracer_survived, "the hit path replaced sys.settrace"
    assert seen.events == 0, f"user code ran on a hit: {seen.calls} ({seen.lines} lines)"
    H.assert_same(got, want)
    st = magpy.stats(compiled)
    assert (st.misses, st.hits, st.records) == (1, 1, 1)


def test_hit_skips_inlined_helper_frame() -> None:
    """On a hit the inlined helper is not called either (no ``_scale_helper`` frame)."""
    compiled = magpy.compile(calls_helper, backend="eager")
    x = torch.randn(2, 3)
    compiled(x)
    with H.count_user_code({__file__}) as seen:
        compiled(torch.randn(2, 3))
    assert seen.events == 0, seen.calls
    with H.count_user_code({__file__}) as eager_seen:
        calls_helper(x)
    assert [c.split(":")[0] for c in eager_seen.calls] == ["calls_helper", "_scale_helper"]


def test_hit_replays_module_attribute_side_effects(programs: Any) -> None:
    """``self.calls += 1`` is replayed by the mock on hits, while no user line runs."""
    net, make = programs.CASES["c_module_attribute_side_effects"]["build"]()
    compiled = magpy.compile(net, backend="eager")
    files = H.user_code_files(net)
    for i in range(4):
        (x,), _ = make(i)
        with H.count_user_code(files) as seen:
            compiled(x)
        assert net.calls == i + 1
        assert net.last_shape == (3, 2)
        if i:
            assert seen.events == 0, seen.calls
    assert magpy.stats(compiled).hits == 3


# ---------- (c) guard changes
def test_changing_module_attribute_adds_a_record() -> None:
    """``m.scale = 3.0`` misses and adds a record with the new value; going back hits again."""
    torch.manual_seed(0)
    net = Scaled(2.0)
    compiled = magpy.compile(net, backend="eager")
    x = torch.randn(3, 4)
    for _ in range(2):
        H.assert_same(compiled(x), net.lin(x) * 2.0)
    net.scale = 3.0
    for _ in range(2):
        H.assert_same(compiled(x), net.lin(x) * 3.0)
    st = magpy.stats(compiled)
    assert (st.records, st.misses, st.hits) == (2, 2, 2)
    net.scale = 2.0
    with H.count_user_code({__file__}) as seen:
        H.assert_same(compiled(x), net.lin(x) * 2.0)
    assert seen.events == 0
    assert (magpy.stats(compiled).records, magpy.stats(compiled).hits) == (2, 3)


def test_train_eval_switch_matches_eager_outputs_and_buffers() -> None:
    """``train()``/``eval()`` selects a record per mode; outputs and BN buffers track eager's."""
    torch.manual_seed(0)
    net = BNNet()
    ref = copy.deepcopy(net)
    compiled = magpy.compile(net, backend="eager")
    modes = [True, True, False, False, True, False, True]
    for i, training in enumerate(modes):
        compiled.train(training)
        ref.train(training)
        assert net.training is training
        x = torch.randn(4, 3, 10, 10, generator=torch.Generator().manual_seed(i))
        H.assert_same(compiled(x), ref(x), f"call {i} (training={training})")
        for (name, b), r in zip(net.named_buffers(), ref.buffers(), strict=True):
            H.assert_same(b, r, f"call {i}: buffer {name}")
    st = magpy.stats(compiled)
    assert (st.records, st.misses, st.hits) == (2, 2, len(modes) - 2)
    assert int(net.bn1.num_batches_tracked) == modes.count(True)


def test_input_dtype_change_adds_a_record() -> None:
    """float32 then float64 inputs: two records, each result in the input's dtype."""
    compiled = magpy.compile(affine, backend="eager")
    for dtype in (torch.float32, torch.float32, torch.float64, torch.float64, torch.float32):
        x = torch.randn(3, dtype=dtype)
        out = compiled(x)
        assert out.dtype is dtype
        H.assert_same(out, affine(x))
    st = magpy.stats(compiled)
    assert (st.records, st.misses, st.hits) == (2, 2, 3)


def test_input_shape_change_adds_a_record() -> None:
    """A new input shape misses and records; the old shape still hits its record."""
    compiled = magpy.compile(MLP(), backend="eager")
    ref = compiled._orig_mod
    for rows in (3, 3, 7, 7, 3):
        x = torch.randn(rows, 8)
        out = compiled(x)
        assert out.shape == (rows, 4)
        H.assert_same(out, ref(x))
    st = magpy.stats(compiled)
    assert (st.records, st.misses, st.hits) == (2, 2, 3)


def test_param_reassignment_uses_new_values() -> None:
    """Replacing a buffer or updating a parameter in place is seen by the next hit."""
    net = Scaled(1.0)
    compiled = magpy.compile(net, backend="eager")
    x = torch.randn(2, 4)
    compiled(x)
    with torch.no_grad():
        net.lin.weight.mul_(-3)
    H.assert_same(compiled(x), net.lin(x))
    net.lin = nn.Linear(4, 4)
    H.assert_same(compiled(x), net.lin(x))


# ---------- (d) explain
@pytest.mark.parametrize("name", CONFORMANCE_STATIC)
def test_explain_static_conformance_program_is_one_graph(name: str, programs: Any) -> None:
    """A static conformance program is captured as one graph with no break."""
    torch.manual_seed(0)
    fn, make = programs.CASES[name]["build"]()
    args, kwargs = make(0)
    ex = magpy.explain(fn)(*args, **kwargs)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), str(ex)
    assert ex.break_reasons == []
    assert len(ex.ops_per_graph) == 1 and ex.ops_per_graph[0]
    assert ex.op_count == len(ex.ops_per_graph[0])
    assert ex.guards


@pytest.mark.parametrize(
    ("target", "make"),
    [
        (MLP, H.randn_inputs((2, 8))),
        (lambda: BNNet().eval(), H.randn_inputs((1, 3, 8, 8))),
        (lambda: BNNet().train(), H.randn_inputs((2, 3, 8, 8))),
        (lambda: returns_containers, H.randn_inputs((2, 3), (3, 4))),
        (lambda: Scaled(3.0), H.randn_inputs((2, 4))),
        (lambda: calls_helper, H.randn_inputs((2, 3))),
    ],
    ids=["mlp", "bn-eval", "bn-train", "containers", "scaled", "helper"],
)
def test_explain_own_static_programs_are_one_graph(
    target: Callable[[], Any], make: Callable[[int], H.Inputs]
) -> None:
    """Each static test program is one graph, no break; ops are listed per graph."""
    args, kwargs = make(0)
    ex = magpy.explain(target())(*args, **kwargs)
    assert (ex.graph_count, ex.graph_break_count, ex.break_reasons) == (1, 0, []), str(ex)
    assert "Graph Count: 1" in str(ex)


def test_explain_accepts_a_compiled_callable_and_leaves_its_cache_alone() -> None:
    """``explain(compiled)`` explains the original and does not add records to ``compiled``."""
    compiled = magpy.compile(MLP(), backend="eager")
    ex = magpy.explain(compiled)(torch.randn(2, 8))
    assert ex.graph_count == 1
    assert magpy.stats(compiled).records == 0


@pytest.mark.parametrize(
    ("fn", "needle", "words"),
    [(prints, 'print("y computed")', ("print",)), (reads_values, "y.numpy()", ("numpy",))],
    ids=["print", "numpy"],
)
def test_explain_reports_break_at_the_users_line(
    fn: Any, needle: str, words: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    """A break names the call that caused it and the user's file and line."""
    ex = magpy.explain(fn)(torch.ones(3))
    assert ex.graph_break_count >= 1
    assert len(ex.graphs) == ex.graph_count == len(ex.ops_per_graph)
    reason = ex.break_reasons[0]
    for word in words:
        assert word in reason.reason
    assert (reason.filename, reason.lineno) == (__file__, line_of(fn, needle))
    assert f"{__file__}:{line_of(fn, needle)}" in str(ex)
    capsys.readouterr()


def bump_and_print(x: torch.Tensor) -> torch.Tensor:
    x.add_(1)
    print("side effect")
    return x * 2


def test_explain_runs_the_call_once(capsys: pytest.CaptureFixture[str]) -> None:
    """``explain`` runs the program once: its side effects happen once, like an eager call."""
    x = torch.zeros(3)
    ex = magpy.explain(bump_and_print)(x)
    assert ex.graph_break_count == 1
    assert capsys.readouterr().out == "side effect\n"
    assert torch.equal(x, torch.ones(3))


def test_explain_break_inside_submodule_points_into_submodule() -> None:
    """A break in a nested module's forward points at that forward's line."""

    class Inner(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * float(x.sum().numpy())

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Inner()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x + 1) - 1

    ex = magpy.explain(Outer())(torch.ones(2))
    assert ex.graph_break_count == 1
    assert ex.break_reasons[0].lineno == line_of(Inner.forward, "x.sum().numpy()")


# ---------- (e) fullgraph
@pytest.mark.parametrize(
    ("fn", "words"), [(prints, ()), (reads_values, ("numpy",))], ids=["print", "numpy"]
)
def test_fullgraph_raises_with_the_reason(
    fn: Any, words: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    """``fullgraph=True`` on a program that breaks raises, naming the reason and the line."""
    compiled = magpy.compile(fn, backend="eager", fullgraph=True)
    for _ in range(2):  # and keeps raising: it never silently falls back to eager
        with pytest.raises(magpy.FullGraphError) as info:
            compiled(torch.ones(3))
        msg = str(info.value)
        assert "fullgraph" in msg and fn.__name__ in msg
        for word in words:
            assert word in msg
        assert f":{line_of(fn, 'print(' if fn is prints else '.numpy()')})" in msg
    assert isinstance(info.value, MagPyError)
    assert magpy.stats(compiled).records == 0
    capsys.readouterr()


def test_fullgraph_accepts_a_static_program(check: Callable[..., Any]) -> None:
    """``fullgraph=True`` changes nothing for a program captured as one graph."""
    check(MLP(), H.randn_inputs((2, 8)), calls=3, fullgraph=True)


def test_without_fullgraph_a_break_runs_correctly(capsys: pytest.CaptureFixture[str]) -> None:
    """Without ``fullgraph`` a program with breaks gives eager's results and side effects."""
    compiled = magpy.compile(reads_values, backend="eager")
    for sign in (1.0, -1.0, 1.0, -1.0, 1.0):
        x = torch.full((3,), sign)
        H.assert_same(compiled(x), reads_values(x))
    assert magpy.stats(compiled).breaks >= 1
    compiled = magpy.compile(bump_and_print, backend="eager")
    for _ in range(3):
        x = torch.zeros(3)
        H.assert_same(compiled(x), torch.full((3,), 2.0))
        H.assert_same(x, torch.ones(3))
        assert capsys.readouterr().out == "side effect\n"


# ---------- (f) API errors
def test_unknown_backend_is_a_value_error_listing_the_choices() -> None:
    """An unknown backend name raises a ValueError subclass that lists the valid names."""
    with pytest.raises(ValueError, match="nope") as info:
        magpy.compile(affine, backend="nope")
    assert isinstance(info.value, MagPyError)
    for name in ("eager", "inductor", "aot_eager"):
        assert name in str(info.value)
    with pytest.raises(ValueError, match="nope"):  # the decorator form checks at once too
        magpy.compile(backend="nope")


def test_backend_of_wrong_type_is_a_type_error() -> None:
    """A backend that is neither a name nor a callable raises TypeError."""
    with pytest.raises(TypeError, match="backend"):
        magpy.compile(affine, backend=3)


def test_bad_dynamic_is_a_type_error() -> None:
    """``dynamic`` must be None/True/False; anything else raises TypeError naming it."""
    with pytest.raises(TypeError, match="dynamic"):
        magpy.compile(affine, dynamic="x")


def test_unknown_option_is_a_value_error() -> None:
    """Unknown ``options`` keys raise a ValueError subclass that lists the known ones."""
    with pytest.raises(ValueError, match="max_records"):
        magpy.compile(affine, options={"nope": 1})
    with pytest.raises(TypeError, match="options"):
        magpy.compile(affine, options=[("max_records", 1)])


def test_compile_of_a_non_callable_is_a_type_error() -> None:
    """Compiling something that cannot be called raises TypeError."""
    with pytest.raises(TypeError, match=r"function or nn\.Module"):
        magpy.compile(42)


def test_stats_of_a_plain_function_is_a_type_error() -> None:
    """``magpy.stats`` of an uncompiled function raises a TypeError subclass saying what to do."""
    with pytest.raises(TypeError, match=r"magpy\.compile") as info:
        magpy.stats(affine)
    assert type(info.value) is not TypeError
    assert isinstance(info.value, MagPyError)


def test_callable_backend_receives_the_graph() -> None:
    """A callable backend gets ``(GraphModule, example_inputs)`` once and its result is used."""
    seen: list[tuple[torch.fx.GraphModule, list[Any]]] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        seen.append((gm, example_inputs))
        return gm.forward

    compiled = H.assert_compiles_like_eager(affine, H.randn_inputs((3,)), calls=3, backend=backend)
    assert len(seen) == 1
    gm, example = seen[0]
    assert isinstance(gm, torch.fx.GraphModule)
    assert [tuple(t.shape) for t in example] == [(3,)]
    assert magpy.stats(compiled).graphs == 1


# ---------- (g) user exceptions
def test_user_exception_passes_through_unchanged() -> None:
    """The user's exception has its type and message on the first call and on later calls."""
    compiled = magpy.compile(raises_on_odd_rows, backend="eager")
    for rows in (3, 3, 2, 2, 5, 2):
        x = torch.randn(rows, 2)
        if rows % 2:
            with pytest.raises(UserError) as info:
                compiled(x)
            assert type(info.value) is UserError
            assert str(info.value) == f"odd number of rows: {rows}"
            assert not isinstance(info.value.__context__, MagPyError)
            assert not isinstance(info.value.__cause__, MagPyError)
        else:
            H.assert_same(compiled(x), x.relu())
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks, st.fallbacks) == (1, 2, 0, 0)


def test_torch_error_passes_through_unchanged() -> None:
    """A torch error (shape mismatch) has eager's type and message, before and after a record."""
    compiled = magpy.compile(matmul, backend="eager")
    bad = (torch.randn(3, 4), torch.randn(5, 2))
    with pytest.raises(RuntimeError) as eager_info:
        matmul(*bad)
    for good_first in (False, True):
        if good_first:
            compiled(torch.randn(3, 4), torch.randn(4, 2))
            compiled(torch.randn(3, 4), torch.randn(4, 2))
        with pytest.raises(RuntimeError) as info:
            compiled(*bad)
        assert type(info.value) is type(eager_info.value)
        assert str(info.value) == str(eager_info.value)
        assert not isinstance(info.value, MagPyError)
    assert magpy.stats(compiled).hits == 1


def test_exception_in_a_submodule_keeps_module_state_like_eager() -> None:
    """An exception raised after a module attribute update leaves the same state as eager."""

    class Counting(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0
            self.lin = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            if x.shape[0] > 3:
                raise UserError("too many rows")
            return self.lin(x)

    net = Counting()
    compiled = magpy.compile(net, backend="eager")
    for i, rows in enumerate((2, 2, 4, 2, 4)):
        if rows > 3:
            with pytest.raises(UserError, match="too many rows"):
                compiled(torch.randn(rows, 2))
        else:
            compiled(torch.randn(rows, 2))
        assert net.calls == i + 1


# ---------- (h) logging
def test_compiling_logs_on_the_magpy_logger(caplog: pytest.LogCaptureFixture) -> None:
    """With the ``magpy`` logger at DEBUG, recording a call logs the record, guard and graph."""
    caplog.set_level(logging.DEBUG, logger="magpy")
    compiled = magpy.compile(affine, backend="eager")
    compiled(torch.randn(3))
    messages = [r.getMessage() for r in caplog.records if r.name == "magpy"]
    assert any("new record for affine" in m for m in messages), messages
    assert any("__magpy_guard" in m for m in messages)
    assert any("__magpy_mock" in m for m in messages)
    caplog.clear()
    compiled(torch.randn(3))  # the first hit logs the guard with its memo (issue 18), once
    messages = [r.getMessage() for r in caplog.records if r.name == "magpy"]
    assert len(messages) == 1 and "__magpy_m" in messages[0], messages
    caplog.clear()
    compiled(torch.randn(3))  # a hit logs nothing
    assert [r for r in caplog.records if r.name == "magpy"] == []


def test_break_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """A graph break is logged with its reason and location."""
    caplog.set_level(logging.DEBUG, logger="magpy")
    magpy.compile(reads_values, backend="eager")(torch.ones(2))
    messages = [r.getMessage() for r in caplog.records if r.name == "magpy"]
    assert any("graph break" in m and "numpy" in m for m in messages), messages


def test_magpy_logs_topics_log_at_info(caplog: pytest.LogCaptureFixture) -> None:
    """A topic enabled in ``MAGPY_LOGS`` (``config.logs``) logs at INFO, others stay at DEBUG."""
    caplog.set_level(logging.INFO, logger="magpy")
    with magpy.config.patch(logs=frozenset({"guards"})):
        magpy.compile(affine, backend="eager")(torch.randn(3))
    info = [r.getMessage() for r in caplog.records if r.name == "magpy"]
    assert len(info) == 1 and "__magpy_guard" in info[0]


def _run_with_magpy_logs(topics: str) -> str:
    program = textwrap.dedent("""
        import torch, magpy
        f = magpy.compile(lambda x: x * 2, backend="eager")
        f(torch.ones(2)); f(torch.ones(2))
    """)
    env = {**os.environ, "MAGPY_LOGS": topics}
    proc = subprocess.run(
        [sys.executable, "-c", program],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def test_magpy_logs_environment_variable_prints_guards() -> None:
    """``MAGPY_LOGS=guards,records`` makes a fresh process print guards and records to stderr."""
    err = _run_with_magpy_logs("guards,records")
    assert "[magpy] new record for" in err
    assert "def __magpy_guard" in err


def test_magpy_logs_prints_only_the_topics_asked_for() -> None:
    """``MAGPY_LOGS=guards`` prints guards but not mocks or graphs."""
    err = _run_with_magpy_logs("guards")
    assert "def __magpy_guard" in err
    assert "__magpy_mock" not in err
    assert "def forward" not in err


# ---------- (i) cache lifecycle and API forms
def test_reset_drops_records_and_counters() -> None:
    """``magpy.reset()`` forgets every record; the next call records again, then hits."""
    compiled = magpy.compile(affine, backend="eager")
    x = torch.randn(3)
    compiled(x)
    compiled(x)
    magpy.reset()
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.misses) == (0, 0, 0)
    H.assert_same(compiled(x), affine(x))
    H.assert_same(compiled(x), affine(x))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.misses) == (1, 1, 1)


def test_max_records_falls_back_to_eager_with_one_warning() -> None:
    """Past ``max_records`` the callable runs eagerly (correctly) and warns once, at the caller.

    ``dynamic=False``: one record per shape (by default the second shape makes a dynamic record).
    """
    compiled = magpy.compile(affine, backend="eager", dynamic=False, options={"max_records": 2})
    with pytest.warns(magpy.MagPyWarning, match="max_records") as caught:
        for n in (1, 2, 3, 1, 4):
            x = torch.randn(n)
            H.assert_same(compiled(x), affine(x))
    assert len(caught) == 1
    assert caught[0].filename == __file__
    st = magpy.stats(compiled)
    assert (st.records, st.fallbacks) == (2, 1)


def test_decorator_forms_and_methods() -> None:
    """``@magpy.compile``, ``@magpy.compile(backend=...)`` and compiled methods all cache."""

    @magpy.compile(backend="eager")
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    class Holder:
        def __init__(self, k: float) -> None:
            self.k = k

        @magpy.compile(backend="eager")
        def scale(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.k

    x = torch.randn(3)
    for _ in range(2):
        H.assert_same(double(x), x * 2)
    assert magpy.stats(double).hits == 1
    assert double.__name__ == "double"
    a, b = Holder(2.0), Holder(5.0)
    for _ in range(2):
        H.assert_same(a.scale(x), x * 2.0)
        H.assert_same(b.scale(x), x * 5.0)
    st = magpy.stats(Holder.scale)
    assert (st.records, st.hits) == (2, 2)
    assert isinstance(magpy.compile(affine), magpy.CompiledFunction)


def test_compiled_module_behaves_as_the_module() -> None:
    """A compiled module exposes the original's parameters, state_dict and attributes."""
    net = Scaled(2.0)
    compiled = magpy.compile(net, backend="eager")
    assert isinstance(compiled, nn.Module)
    assert list(compiled.parameters()) == list(net.parameters())
    assert list(compiled.state_dict()) == list(net.state_dict())
    assert compiled.scale == 2.0
    assert compiled.eval() is compiled and not net.training
    assert magpy.compile(compiled, backend="eager")._magpy_original is net
