"""``magpy.compile`` as a drop-in for ``torch.compile`` (issue 21): its parameters and the
``torch.compiler`` controls.

- ``mode`` and ``options`` reach Inductor as torch.compile passes them (``mode``'s settings
  from ``torch._inductor.list_mode_options``, ``options`` as an Inductor config patch around
  MagPy's compiles); MagPy's own knobs are ``"magpy.<name>"``; every mistake is an error that
  names the parameter (an unknown option lists the closest Inductor names).
- ``disable=True`` returns the model itself, as torch.compile does.
- ``torch.compiler.disable(fn)`` / ``magpy.disable(fn)`` called from a compiled function: a
  graph break at the call, the function runs natively and none of its operations is in a
  graph; ``with magpy.disable():`` makes compiled callables run their original code.
"""

from __future__ import annotations

import warnings

import _integration_helpers as H
import pytest
import torch

import magpy
from magpy_codegen import ConfiguredInductor
from magpy_refgraph import UnknownOptionError


def double_relu(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) * 2


@pytest.mark.parametrize(
    ("kwargs", "patch"),
    [
        ({"mode": "max-autotune-no-cudagraphs"}, {"max_autotune": True}),
        ({"mode": "reduce-overhead"}, {"triton.cudagraphs": True}),
        (
            {"options": {"epilogue_fusion": False, "magpy.max_records": 3}},
            {"epilogue_fusion": False},
        ),
    ],
    ids=["max-autotune-no-cudagraphs", "reduce-overhead", "options"],
)
def test_mode_and_options_reach_inductor(
    kwargs: dict, patch: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The settings patch Inductor's config while MagPy compiles (seen from inside the
    compile), and the compiled function equals eager with one record."""
    import torch._inductor.compile_fx as compile_fx
    import torch._inductor.config as inductor_config

    seen: dict[str, object] = {}
    compiled = magpy.compile(double_relu, **kwargs)
    backend = compiled._magpy_state.backend
    assert isinstance(backend, ConfiguredInductor)
    assert patch.items() <= backend.patch.items(), backend

    real = compile_fx.compile_fx

    def spy(gm, inputs, *a, **k):  # type: ignore[no-untyped-def]
        seen.update({key: inductor_config.get_config_copy()[key] for key in patch})
        seen["fallback_random"] = inductor_config.fallback_random
        return real(gm, inputs, *a, **k)

    monkeypatch.setattr(compile_fx, "compile_fx", spy)
    for _ in range(3):
        x = torch.randn(8)
        H.assert_same(compiled(x), double_relu(x))
    assert seen == {**patch, "fallback_random": True}, seen
    st = magpy.stats(compiled)
    assert (st.records, st.hits) == (1, 2), st
    if "options" in kwargs:
        assert compiled._magpy_state.max_records == 3


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mode": "bogus"}, UnknownOptionError, "mode 'bogus' unknown"),
        ({"mode": 3}, TypeError, "mode must be"),
        ({"options": {"triton.cudagraph": True}}, UnknownOptionError, "triton.cudagraphs"),
        ({"options": {"max_autotune": "yes"}}, TypeError, r"options\['max_autotune'\]"),
        ({"options": {"magpy.bogus": 1}}, UnknownOptionError, "magpy.max_records"),
        ({"options": {"magpy.max_records": 0}}, ValueError, "magpy.max_records"),
        ({"options": []}, TypeError, "options must be a dict"),
        ({"mode": "max-autotune", "options": {"max_autotune": True}}, ValueError, "both"),
        ({"backend": "eager", "mode": "max-autotune"}, ValueError, "mode"),
        ({"backend": "eager", "options": {"max_autotune": True}}, ValueError, "options"),
        ({"disable": 1}, TypeError, "disable must be"),
    ],
)
def test_bad_settings_are_errors_naming_the_parameter(
    kwargs: dict, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        magpy.compile(double_relu, **kwargs)


def test_disable_true_returns_the_model_itself() -> None:
    model = torch.nn.Linear(2, 2)
    assert magpy.compile(model, disable=True) is model
    assert magpy.compile(disable=True, backend="eager")(double_relu) is double_relu
    assert magpy.compile(torch.compiler.disable(double_relu)).__wrapped__ is double_relu


CALLS: list[str] = []


def logged_scale(x: torch.Tensor) -> torch.Tensor:
    CALLS.append("ran")
    return x * 3 + 1


@pytest.mark.parametrize("disabler", ["torch", "magpy"])
def test_a_disabled_function_runs_natively_at_a_break(disabler: str) -> None:
    """Called from a compiled function, a disabled function is a graph break: its own
    operations are in no graph (the graphs hold only the caller's), it runs on every call,
    and the result equals eager's."""
    off = (
        torch.compiler.disable(logged_scale) if disabler == "torch" else magpy.disable(logged_scale)
    )

    def program(x: torch.Tensor) -> torch.Tensor:
        y = torch.sin(x)
        z = off(y)
        return torch.cos(z)

    ex = H.explain_quietly(program, torch.randn(4))
    ops = [op for graph in ex.ops_per_graph for op in graph]
    assert ex.graph_break_count == 1 and "is disabled" in H.break_text(ex), ex
    assert "mul" not in ops and "add" not in ops and {"sin", "cos"} <= set(ops), ops
    compiled = magpy.compile(program, backend="eager")
    CALLS.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", magpy.MagPyWarning)
        for _ in range(4):
            x = torch.randn(4)
            H.assert_same(compiled(x), program(x))
    assert len(CALLS) == 8  # (4 compiled calls, 4 eager ones: it ran every time)


def test_inside_magpy_disable_compiled_callables_run_their_original_code() -> None:
    compiled = magpy.compile(logged_scale, backend="eager")
    compiled(torch.randn(2))  # a record
    CALLS.clear()
    with magpy.disable():
        for _ in range(3):
            x = torch.randn(2)
            H.assert_same(compiled(x), logged_scale(x))
    assert len(CALLS) == 6  # the program ran each time (a hit would not have)
    assert magpy.stats(compiled).hits == 0
    compiled(torch.randn(2))
    assert magpy.stats(compiled).hits == 1  # and outside the block, the record serves


def test_fullgraph_raises_at_the_break_before_the_breaking_call_runs() -> None:
    """``fullgraph=True``: the first graph break raises ``FullGraphError`` in the program at
    the breaking instruction, before it runs (here a ``print``); what ran before it ran once,
    as MagPy watches a real run. TorchDynamo raises before running anything."""
    log: list[str] = []

    def program(x: torch.Tensor) -> torch.Tensor:
        log.append("before")
        y = x * 2
        print("never printed")
        log.append("after")
        return y

    compiled = magpy.compile(program, backend="eager", fullgraph=True)
    with pytest.raises(magpy.FullGraphError, match=r"print\(\)") as info:
        compiled(torch.ones(2))
    assert log == ["before"]
    assert info.value.lineno == program.__code__.co_firstlineno + 3  # the print
    assert magpy.stats(compiled).breaks == 1


def _sin_times_three(x: torch.Tensor) -> torch.Tensor:
    CALLS.append("helper")
    return torch.sin(x) * 3


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_allow_in_graph_makes_one_node_of_a_function(backend: str) -> None:
    """``torch.compiler.allow_in_graph(fn)`` before compiling: ``fn`` is one node of the graph,
    not followed (its Python runs when the graph runs, as under TorchDynamo)."""
    torch.compiler.allow_in_graph(_sin_times_three)

    def program(x: torch.Tensor) -> torch.Tensor:
        return _sin_times_three(x + 1) + 2

    ex = H.explain_quietly(program, torch.randn(3))
    assert ex.ops_per_graph == [["add", "_sin_times_three", "add"]], ex
    compiled = magpy.compile(program, backend=backend)
    for _ in range(3):
        x = torch.randn(3)
        H.assert_same(compiled(x), program(x))
    assert magpy.stats(compiled).records == 1
