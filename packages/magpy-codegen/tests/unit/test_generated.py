"""Unit tests for generated source handling (_generated.py): linecache, names, printing."""

from __future__ import annotations

import gc
import keyword
import linecache
import traceback
from typing import Any

import pytest
import torch

from magpy_codegen import GeneratedCode, NameAllocator
from magpy_refgraph import InternalError


class TestGeneratedCode:
    def test_load_registers_source_in_linecache(self) -> None:
        """After load(), linecache returns the generated lines under the pseudo-filename."""
        code = GeneratedCode("def __magpy_f(a):\n    return a + k\n", {"k": 1}, "probe")
        ns = code.load()
        assert ns["__magpy_f"](1) == 2
        assert code.filename.startswith("<magpy-probe")
        assert linecache.getlines(code.filename) == code.source.splitlines(keepends=True)

    def test_each_load_gets_a_unique_filename(self) -> None:
        """Two loads of generated code never share a linecache entry."""
        a = GeneratedCode("x = 1\n", {}, "probe")
        b = GeneratedCode("x = 2\n", {}, "probe")
        a.load()
        b.load()
        assert a.filename != b.filename
        assert linecache.getlines(a.filename) == ["x = 1\n"]
        assert linecache.getlines(b.filename) == ["x = 2\n"]

    def test_globals_are_copied_not_shared(self) -> None:
        """The namespace is a copy: running the code does not change the given globals."""
        g = {"k": 1}
        GeneratedCode("k = 5\n", g, "probe").load()
        assert g == {"k": 1}

    def test_traceback_shows_generated_line(self) -> None:
        """An exception raised in generated code shows the generated line in its traceback."""
        code = GeneratedCode("def __magpy_f():\n    raise ValueError('in generated')\n", {}, "tb")
        f = code.load()["__magpy_f"]
        with pytest.raises(ValueError) as info:
            f()
        text = "".join(traceback.format_exception(info.value))
        assert code.filename in text
        assert "raise ValueError('in generated')" in text

    def test_the_entry_lives_as_long_as_the_code_using_it(self) -> None:
        """The linecache entry stays while a function the source defined lives (even once the
        GeneratedCode is gone), and goes with the last of them."""
        code = GeneratedCode("def __magpy_f():\n    raise ValueError('late')\n", {}, "life")
        f = code.load()["__magpy_f"]
        name = code.filename
        del code
        gc.collect()
        assert linecache.getlines(name) == ["def __magpy_f():\n", "    raise ValueError('late')\n"]
        with pytest.raises(ValueError) as info:
            f()
        assert "raise ValueError('late')" in "".join(traceback.format_exception(info.value))
        del f, info
        gc.collect()
        assert name not in linecache.cache


class TestNameAllocator:
    def test_fresh_names_are_distinct(self) -> None:
        """fresh() never returns the same name twice, even for different hints."""
        names = NameAllocator()
        got = [names.fresh("v") for _ in range(5)] + [names.fresh("b") for _ in range(5)]
        assert len(set(got)) == len(got)
        assert all(n.isidentifier() and not keyword.iskeyword(n) for n in got)

    def test_constants_are_interned_by_identity_with_the_prefix(self) -> None:
        """const(obj) gives one prefixed name per object; equal objects get distinct names."""
        names = NameAllocator()
        a, b = [1], [1]
        assert names.const(a) == names.const(a)
        assert names.const(a) != names.const(b)
        assert all(n.startswith("__magpy_") for n in names.consts)
        assert names.consts[names.const(a)] is a


class TestRecordSource:
    def test_guard_and_mock_are_in_linecache_and_printable(self, record_of: Any) -> None:
        """A record's guard and mock source are registered in linecache and print as text."""
        rec, _ = record_of(lambda x: x * 2 + 1, torch.ones(2))
        for code in (rec.guard_code, rec.mock_code):
            lines = linecache.getlines(code.filename)
            assert lines
            assert "".join(lines) == code.source
        assert rec.guard_source.startswith("# guard of ")
        assert "def __magpy_guard(fn, args, kwargs):" in rec.guard_source
        assert "def __magpy_mock(fn, args, kwargs, inputs):" in rec.mock_source
        compile(rec.guard_source, "<check>", "exec")
        compile(rec.mock_source, "<check>", "exec")

    def test_generated_functions_carry_the_pseudo_filename(self, record_of: Any) -> None:
        """The guard and mock functions' code objects name their linecache entries."""
        rec, _ = record_of(lambda x: x - 1, torch.ones(2))
        assert rec.guard.check.__code__.co_filename == rec.guard_code.filename
        assert rec.mock.__code__.co_filename == rec.mock_code.filename

    def test_mock_failure_traceback_shows_the_mock_line(self, record_of: Any) -> None:
        """If the compiled graph raises, the traceback shows the mock's calling line."""

        def exploding_backend(gm: Any, example_inputs: list[Any]) -> Any:
            def run(*inputs: Any) -> Any:
                raise RuntimeError("backend blew up")

            return run

        def f(t: torch.Tensor) -> torch.Tensor:
            return t + 1

        rec, _ = record_of(f, torch.ones(2), backend=exploding_backend)
        x = torch.ones(2)
        inputs = rec.guard.check(f, (x,), {})
        assert inputs is not None
        # (the graph run as it is does not raise: the error is the backend's, an internal
        # error chained to it; the cache then falls back to eager)
        with pytest.raises(InternalError) as info:
            rec.mock(f, (x,), {}, inputs)
        assert "blew up" in str(info.value.__cause__)
        text = "".join(traceback.format_exception(info.value))
        assert rec.mock_code.filename in text
        assert "__magpy_outs = __magpy_graph(*inputs)" in text
