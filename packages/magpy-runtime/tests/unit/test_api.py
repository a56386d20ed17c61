"""Unit tests for the public API (_api.py): compile, stats, explain, reset, annotate."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn

import magpy_codegen._record as record
import magpy_runtime as magpy
from magpy_refgraph import MagPyError, NotCompiledError, UnknownOptionError
from magpy_runtime._config import Config


def affine(x: torch.Tensor) -> torch.Tensor:
    """Scale and shift."""
    return x * 2 + 1


def prints(x: torch.Tensor) -> torch.Tensor:
    print("side effect")  # BREAK
    return x + 1


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.k = 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.k


def _user_calls_on(code: types.CodeType, fn: Callable[[], Any]) -> int:
    """How many times a Python frame of ``code`` starts while ``fn()`` runs."""
    calls = 0

    def profiler(frame: types.FrameType, event: str, arg: object) -> None:
        nonlocal calls
        if event == "call" and frame.f_code is code:
            calls += 1

    sys.setprofile(profiler)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


class TestCompileForms:
    def test_compile_as_a_function(self) -> None:
        """magpy.compile(fn, backend='eager') returns a callable equal to eager."""
        fast = magpy.compile(affine, backend="eager")
        x = torch.randn(3)
        assert torch.equal(fast(x), affine(x))

    def test_compile_as_a_bare_decorator(self) -> None:
        """@magpy.compile works without arguments (the default backend is not run here)."""

        @magpy.compile
        def f(x: torch.Tensor) -> torch.Tensor:
            return x + 1

        assert isinstance(f, magpy.CompiledFunction)
        assert f.__name__ == "f"

    def test_compile_as_a_decorator_with_arguments(self) -> None:
        """@magpy.compile(backend='eager') compiles the decorated function."""

        @magpy.compile(backend="eager")
        def f(x: torch.Tensor) -> torch.Tensor:
            return x - 1

        x = torch.randn(2)
        assert torch.equal(f(x), x - 1)
        assert torch.equal(f(x), x - 1)
        assert magpy.stats(f).hits == 1

    def test_wrapper_keeps_name_doc_and_wrapped(self) -> None:
        """The compiled function carries the original's name, docstring and __wrapped__."""
        fast = magpy.compile(affine, backend="eager")
        assert fast.__name__ == "affine"
        assert fast.__doc__ == "Scale and shift."
        assert fast.__wrapped__ is affine
        assert "affine" in repr(fast)

    def test_compile_of_a_compiled_function_unwraps(self) -> None:
        """Compiling a compiled function compiles the original, with a fresh cache."""
        first = magpy.compile(affine, backend="eager")
        second = magpy.compile(first, backend="eager")
        assert second._magpy_original is affine
        second(torch.ones(2))
        assert magpy.stats(first).misses == 0

    def test_decorated_method_binds_self(self) -> None:
        """A compiled function used as a method receives self."""

        class Scaler:
            def __init__(self, k: int) -> None:
                self.k = k

            @magpy.compile(backend="eager")
            def apply(self, x: torch.Tensor) -> torch.Tensor:
                return x * self.k

        s = Scaler(3)
        x = torch.ones(2)
        assert torch.equal(s.apply(x), x * 3)
        assert torch.equal(s.apply(x), x * 3)
        assert torch.equal(Scaler(4).apply(x), x * 4)
        assert Scaler.apply.__name__ == "apply"

    def test_cache_hit_runs_no_user_code(self) -> None:
        """After the first call, a hit does not execute the user's function at all."""
        fast = magpy.compile(affine, backend="eager")
        x = torch.ones(2)
        assert _user_calls_on(affine.__code__, lambda: fast(x)) == 1  # the monitored miss
        assert _user_calls_on(affine.__code__, lambda: fast(x)) == 0
        assert magpy.stats(fast).hits == 1

    def test_user_exception_propagates_and_next_call_records(self) -> None:
        """An exception of the program reaches the caller; a later good call still records."""

        def checked(x: torch.Tensor) -> torch.Tensor:
            if x.shape[0] > 3:
                raise ValueError("too long")
            return x * 2

        fast = magpy.compile(checked, backend="eager")
        with pytest.raises(ValueError, match="too long"):
            fast(torch.ones(5))
        assert torch.equal(fast(torch.ones(2)), torch.full((2,), 2.0))
        assert magpy.stats(fast).records == 1


class TestCompiledModule:
    def test_module_result_behaves_as_the_module(self) -> None:
        """compile(module) is an nn.Module whose calls give the module's results."""
        net = Net()
        fast = magpy.compile(net, backend="eager")
        x = torch.randn(4, 3)
        assert isinstance(fast, nn.Module)
        assert torch.equal(fast(x), net(x))
        assert torch.equal(fast(x), net(x))
        assert magpy.stats(fast).hits == 1

    def test_parameters_and_state_dict_are_the_modules(self) -> None:
        """parameters() are the very parameter objects; state_dict keys have no prefix."""
        net = Net()
        fast = magpy.compile(net, backend="eager")
        assert [id(p) for p in fast.parameters()] == [id(p) for p in net.parameters()]
        assert list(fast.state_dict()) == list(net.state_dict()) == ["lin.weight", "lin.bias"]

    def test_load_state_dict_reaches_the_module(self) -> None:
        """load_state_dict on the compiled module updates the wrapped module."""
        net, other = Net(), Net()
        fast = magpy.compile(net, backend="eager")
        fast.load_state_dict(other.state_dict())
        assert torch.equal(net.lin.weight, other.lin.weight)

    def test_attribute_reads_reach_the_module(self) -> None:
        """Attributes and submodules of the wrapped module are readable on the wrapper."""
        net = Net()
        fast = magpy.compile(net, backend="eager")
        assert fast.k == 2
        assert fast.lin is net.lin
        assert "Net" in repr(fast)

    def test_train_and_eval_switch_the_wrapped_module(self) -> None:
        """train()/eval() return the wrapper and switch the wrapped module's mode."""
        net = Net()
        fast = magpy.compile(net, backend="eager")
        assert fast.eval() is fast
        assert net.training is False and net.lin.training is False
        assert fast.train() is fast
        assert net.training is True

    def test_training_flag_of_the_wrapper_follows_eval(self) -> None:
        """After eval(), the compiled module's own .training is False like the module's."""
        fast = magpy.compile(Net(), backend="eager")
        fast.eval()
        assert fast.training is False

    def test_attribute_writes_reach_the_module(self) -> None:
        """Setting a plain attribute on the compiled module sets it on the wrapped module."""
        net = Net()
        fast = magpy.compile(net, backend="eager")
        fast.k = 5
        assert net.k == 5

    def test_module_attribute_change_is_seen_by_the_next_call(self) -> None:
        """Changing a guarded module attribute directly misses and gives the new result."""
        net = Net()
        fast = magpy.compile(net, backend="eager")
        x = torch.randn(2, 3)
        fast(x)
        net.k = 3
        assert torch.equal(fast(x), net(x))
        assert magpy.stats(fast).misses == 2


class TestArgumentValidation:
    def test_unknown_backend_is_a_value_error_naming_choices(self) -> None:
        """An unknown backend name fails at compile time, listing the known ones."""
        with pytest.raises(ValueError, match="nope") as info:
            magpy.compile(affine, backend="nope")
        assert isinstance(info.value, UnknownOptionError)
        assert "eager" in str(info.value) and "inductor" in str(info.value)

    def test_unknown_backend_fails_in_decorator_form_too(self) -> None:
        """@magpy.compile(backend='nope') fails when the decorator is made."""
        with pytest.raises(UnknownOptionError):
            magpy.compile(backend="nope")

    def test_callable_backend_is_accepted_and_called(self) -> None:
        """A callable backend is called with (GraphModule, example_inputs)."""
        calls: list[tuple[str, list[tuple[int, ...]]]] = []

        def backend(gm: Any, example_inputs: list[Any]) -> Any:
            calls.append((type(gm).__name__, [tuple(t.shape) for t in example_inputs]))
            return gm.forward

        fast = magpy.compile(affine, backend=backend)
        fast(torch.ones(2, 3))
        assert calls == [("GraphModule", [(2, 3)])]

    @pytest.mark.parametrize("bad", [3, [1]], ids=["int", "list"])
    def test_bad_backend_type_is_a_type_error(self, bad: Any) -> None:
        """A backend that is neither a name nor a callable is a TypeError."""
        with pytest.raises(TypeError):
            magpy.compile(affine, backend=bad)

    def test_non_callable_model_is_a_type_error(self) -> None:
        """compile(3) says it needs a function or module."""
        with pytest.raises(TypeError, match=r"function or nn\.Module"):
            magpy.compile(3, backend="eager")

    def test_bad_dynamic_is_a_type_error(self) -> None:
        """dynamic must be None, True or False."""
        with pytest.raises(TypeError, match="dynamic"):
            magpy.compile(affine, backend="eager", dynamic="yes")

    def test_options_must_be_a_dict_of_known_names(self) -> None:
        """options must be a dict; unknown keys raise UnknownOptionError naming the known ones."""
        with pytest.raises(TypeError, match="options"):
            magpy.compile(affine, backend="eager", options=[("max_records", 1)])
        with pytest.raises(UnknownOptionError, match="max_records") as info:
            magpy.compile(affine, backend="eager", options={"bogus": 1})
        assert "bogus" in str(info.value)

    def test_errors_are_magpy_errors_where_they_are_ours(self) -> None:
        """Option errors belong to MagPy's exception tree (and to ValueError)."""
        with pytest.raises(MagPyError):
            magpy.compile(affine, backend="eager", options={"bogus": 1})

    @pytest.mark.parametrize("bad", ["no", "yes", 1, 0, None], ids=repr)
    def test_fullgraph_must_be_a_bool(self, bad: Any) -> None:
        """fullgraph="no" is not taken as true: anything but a bool is refused."""
        with pytest.raises(TypeError, match="fullgraph"):
            magpy.compile(affine, backend="eager", fullgraph=bad)

    @pytest.mark.parametrize("bad", [1, 0, "yes", 1.0], ids=repr)
    def test_dynamic_must_be_none_or_a_bool(self, bad: Any) -> None:
        """dynamic=1 is refused although 1 == True."""
        with pytest.raises(TypeError, match="dynamic"):
            magpy.compile(affine, backend="eager", dynamic=bad)

    @pytest.mark.parametrize("bad", [0, -1, "a", None, True, 2.0], ids=repr)
    def test_max_records_must_be_a_positive_int(self, bad: Any) -> None:
        """options['max_records'] is checked where it is given, naming the option."""
        with pytest.raises(ValueError, match="max_records"):
            magpy.compile(affine, backend="eager", options={"max_records": bad})

    def test_max_records_from_the_environment_is_checked(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """MAGPY_MAX_RECORDS=0 or =a is an error naming the variable; unset gives 8."""
        for bad in ("0", "-2", "a"):
            monkeypatch.setenv("MAGPY_MAX_RECORDS", bad)
            with pytest.raises(ValueError, match="MAGPY_MAX_RECORDS"):
                Config.from_env()
        monkeypatch.delenv("MAGPY_MAX_RECORDS")
        assert Config.from_env().max_records == 8

    def test_explain_of_a_non_callable_is_a_type_error(self) -> None:
        """explain(3) fails at once, not deep inside the capture."""
        with pytest.raises(TypeError, match="explain"):
            magpy.explain(3)


class TestBackendFaults:
    def test_a_backend_returning_none_is_named_and_the_call_is_eager(self) -> None:
        """A backend that returns None: one warning naming it, eager's results, no NameError."""

        def broken(gm: Any, example_inputs: list[Any]) -> Any:
            return None

        fast = magpy.compile(affine, backend=broken)
        x = torch.randn(2, 3)
        with pytest.warns(magpy.MagPyWarning, match=r"backend 'broken' returned None") as seen:
            out = fast(x)
        assert len(seen) == 1
        assert torch.equal(out, affine(x))
        assert torch.equal(fast(x), affine(x))  # later calls: eager, no second warning
        assert magpy.stats(fast).records == 0

    def test_a_backend_that_raises_is_named(self) -> None:
        """An exception inside the backend is reported as the backend's, with its message."""

        def failing(gm: Any, example_inputs: list[Any]) -> Any:
            raise RuntimeError("no kernel today")

        fast = magpy.compile(affine, backend=failing)
        x = torch.randn(2, 3)
        with pytest.warns(magpy.MagPyWarning, match=r"backend 'failing' failed.*no kernel today"):
            assert torch.equal(fast(x), affine(x))

    def test_a_guard_generation_fault_is_not_blamed_on_the_backend(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A fault while generating the guard says so (it used to read "backend compile failed")."""

        def fault(*args: Any, **kwargs: Any) -> Any:
            raise KeyError("boom")

        monkeypatch.setattr(record, "generate_guard", fault)
        fast = magpy.compile(affine, backend="eager")
        x = torch.randn(2, 3)
        with pytest.warns(magpy.MagPyWarning, match="generating the guard or mock") as seen:
            assert torch.equal(fast(x), affine(x))
        assert "backend" not in str(seen[0].message)


class TestStats:
    def test_counters_follow_misses_hits_and_records(self) -> None:
        """stats counts misses, hits, records and graphs of one compiled callable."""
        fast = magpy.compile(affine, backend="eager")
        assert magpy.stats(fast) == magpy.CacheStats(0, 0, 0, 0, 0, 0)
        fast(torch.ones(2))
        fast(torch.ones(2))
        fast(torch.ones(3))
        s = magpy.stats(fast)
        assert (s.misses, s.hits, s.records, s.graphs, s.breaks, s.fallbacks) == (2, 1, 2, 2, 0, 0)

    def test_break_is_counted_and_results_stay_correct(self, capsys: Any) -> None:
        """A graph break is counted with its location; every call is correct and prints."""
        fast = magpy.compile(prints, backend="eager")
        for n in (2, 2, 2):
            x = torch.randn(n)
            assert torch.equal(fast(x), x + 1)
        s = magpy.stats(fast)
        assert s.breaks >= 1
        reasons = fast._magpy_state.break_reasons
        assert reasons and reasons[0].lineno == prints.__code__.co_firstlineno + 1
        assert capsys.readouterr().out == "side effect\n" * 3

    def test_record_without_ops_has_no_graph(self) -> None:
        """A record of a program without tensor ops counts as a record but not a graph."""
        fast = magpy.compile(lambda a, n: n * 2, backend="eager")
        assert fast(torch.ones(1), 3) == 6
        s = magpy.stats(fast)
        assert (s.records, s.graphs) == (1, 0)

    def test_stats_of_a_plain_function_is_not_compiled_error(self) -> None:
        """stats(fn) on a plain function raises NotCompiledError (a TypeError) saying why."""
        with pytest.raises(TypeError, match=r"magpy\.compile") as info:
            magpy.stats(affine)
        assert isinstance(info.value, NotCompiledError)


class TestReset:
    def test_reset_clears_records_and_counters(self) -> None:
        """reset() drops every record; the next call is a miss again."""
        fast = magpy.compile(affine, backend="eager")
        fast(torch.ones(2))
        fast(torch.ones(2))
        magpy.reset()
        assert magpy.stats(fast) == magpy.CacheStats(0, 0, 0, 0, 0, 0)
        fast(torch.ones(2))
        assert magpy.stats(fast).misses == 1 and magpy.stats(fast).records == 1

    def test_reset_forgets_breaks_and_monitors_again(self, capsys: Any) -> None:
        """After reset(), a callable that met a break is monitored again from scratch."""
        fast = magpy.compile(prints, backend="eager")
        fast(torch.ones(2))
        fast(torch.ones(2))
        magpy.reset()
        assert magpy.stats(fast) == magpy.CacheStats(0, 0, 0, 0, 0, 0)
        x = torch.ones(2)
        assert torch.equal(fast(x), x + 1)
        s = magpy.stats(fast)
        assert s.misses >= 1 and s.breaks >= 1
        capsys.readouterr()


class TestExplain:
    def test_fields_of_a_captured_call(self) -> None:
        """explain reports one graph, no break, the ops and the guards."""
        out = magpy.explain(affine)(torch.ones(3))
        assert isinstance(out, magpy.ExplainOutput)
        assert out.graph_count == 1 and len(out.graphs) == 1
        assert out.graph_break_count == 0 and out.break_reasons == []
        assert out.ops_per_graph == [["mul", "add"]]
        assert out.op_count == 2
        assert out.guards and all(g.startswith("if ") for g in out.guards)
        assert out.out_guards == out.guards
        assert "RefGraph" in out.refgraph
        text = str(out)
        assert "Graph Count: 1" in text and "Graph Break Count: 0" in text
        assert "mul, add" in text

    def test_break_reasons_name_reason_file_and_line(self, capsys: Any) -> None:
        """A break is reported with its reason and the user's file and line."""
        out = magpy.explain(prints)(torch.ones(3))
        capsys.readouterr()
        assert out.graph_break_count == len(out.break_reasons) >= 1
        reason = out.break_reasons[0]
        assert reason.reason
        assert reason.filename == prints.__code__.co_filename
        assert reason.lineno == prints.__code__.co_firstlineno + 1
        assert f"{reason.filename}:{reason.lineno}" in str(out)
        assert "Break Reasons:" in str(out)

    def test_explain_of_a_compiled_function_leaves_its_cache_alone(self) -> None:
        """explain(compiled) explains the original and adds no record to the compiled cache."""
        fast = magpy.compile(affine, backend="eager")
        out = magpy.explain(fast)(torch.ones(3))
        assert out.graph_count == 1
        assert magpy.stats(fast) == magpy.CacheStats(0, 0, 0, 0, 0, 0)

    def test_explain_runs_the_call_once(self, capsys: Any) -> None:
        """explain runs the program for real, exactly once."""
        magpy.explain(prints)(torch.ones(1))
        assert capsys.readouterr().out == "side effect\n"


class TestAnnotate:
    def test_effect_annotation_makes_a_break(self) -> None:
        """annotate(fn, effect=True) makes calls to fn a graph break naming it."""

        def log_value(t: torch.Tensor) -> torch.Tensor:
            return t

        assert magpy.annotate(log_value, effect=True) is log_value

        def f(x: torch.Tensor) -> torch.Tensor:
            return log_value(x) + 1

        out = magpy.explain(f)(torch.ones(2))
        assert out.graph_break_count == 1
        assert "log_value" in out.break_reasons[0].reason

    def test_as_op_annotation_makes_one_graph_node(self) -> None:
        """annotate(fn, as_op=True) records fn as one operator of the graph."""

        def fused(t: torch.Tensor) -> torch.Tensor:
            return t * 2 + 1

        magpy.annotate(fused, as_op=True)
        out = magpy.explain(lambda x: fused(x) - 1)(torch.ones(2))
        assert out.ops_per_graph == [["fused", "sub"]]

    @pytest.mark.parametrize(
        "kwargs",
        [{}, {"pure": True, "effect": True}, {"pure": True, "inplace": (0,)}],
        ids=["none", "two_kinds", "inplace_without_as_op"],
    )
    def test_bad_annotations_are_value_errors(self, kwargs: dict[str, Any]) -> None:
        """annotate needs exactly one kind, and inplace= only with as_op=True."""
        with pytest.raises(ValueError):
            magpy.annotate(lambda t: t, **kwargs)

    def test_annotate_needs_a_callable(self) -> None:
        """annotate(3, pure=True) is a TypeError."""
        with pytest.raises(TypeError):
            magpy.annotate(3, pure=True)
