"""Unit tests for the record cache (_cache.py, _config.py): MRU, bounds, fallbacks, threads."""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

import magpy_runtime as magpy
from magpy_refgraph import RefGraph
from magpy_runtime import MagPyWarning, config
from magpy_runtime._config import Config
from magpy_runtime._settings import Settings


def affine(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


# Tests below that need one record per shape compile with dynamic=False: by default a changed
# size makes the next record dynamic in that size (see test_dynamic_shapes.py in integration/).


def _records(fast: Any) -> list[Any]:
    return list(fast._magpy_state.records)


class TestMostRecentlyUsedOrder:
    def test_new_record_goes_first(self) -> None:
        """The newest record is tried first."""
        fast = magpy.compile(affine, backend="eager")
        fast(torch.ones(2))
        first = _records(fast)[0]
        fast(torch.ones(3))
        assert _records(fast)[1] is first

    def test_hit_moves_the_record_to_the_front(self) -> None:
        """A hit on an older record moves it to the front and counts on that record."""
        fast = magpy.compile(affine, backend="eager", dynamic=False)
        fast(torch.ones(2))
        two = _records(fast)[0]
        fast(torch.ones(3))
        three = _records(fast)[0]
        assert _records(fast) == [three, two]
        fast(torch.ones(2))
        assert _records(fast) == [two, three]
        assert (two.hits, three.hits) == (1, 0)
        fast(torch.ones(2))
        assert _records(fast) == [two, three] and two.hits == 2

    def test_results_stay_correct_across_records(self) -> None:
        """Alternating shapes hit the matching record every time."""
        fast = magpy.compile(affine, backend="eager", dynamic=False)
        for _ in range(3):
            for n in (2, 3, 4):
                x = torch.randn(n)
                assert torch.equal(fast(x), affine(x))
        s = magpy.stats(fast)
        assert (s.records, s.misses, s.hits) == (3, 3, 6)


class TestMaxRecords:
    def test_third_shape_runs_eagerly_with_one_warning(self) -> None:
        """max_records=2: the 3rd distinct shape runs eagerly, warns once, stays correct."""
        fast = magpy.compile(affine, backend="eager", dynamic=False, options={"max_records": 2})
        a, b, c, d = torch.randn(2), torch.randn(3), torch.randn(4), torch.randn(5)
        assert torch.equal(fast(a), affine(a))
        assert torch.equal(fast(b), affine(b))
        with pytest.warns(MagPyWarning, match="max_records") as caught:
            assert torch.equal(fast(c), affine(c))
        assert len(caught) == 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert torch.equal(fast(d), affine(d))
            assert torch.equal(fast(a), affine(a))
        s = magpy.stats(fast)
        assert s.records == 2
        assert s.fallbacks == 1

    def test_config_bound_applies_without_option(self) -> None:
        """Without options, config.max_records bounds the records."""
        with config.patch(max_records=1):
            fast = magpy.compile(affine, backend="eager")
            fast(torch.ones(2))
            with pytest.warns(MagPyWarning):
                fast(torch.ones(3))
        assert magpy.stats(fast).records == 1

    def test_option_overrides_config(self) -> None:
        """options={'max_records': n} wins over config.max_records."""
        with config.patch(max_records=1):
            fast = magpy.compile(affine, backend="eager", dynamic=False, options={"max_records": 3})
            for n in (2, 3, 4):
                fast(torch.ones(n))
        assert magpy.stats(fast).records == 3


class TestFallback:
    def test_backend_failure_falls_back_with_one_warning(self) -> None:
        """A backend that raises is absorbed: one MagPyWarning, eager results, no retries."""
        calls: list[int] = []

        def broken(gm: Any, example_inputs: list[Any]) -> Any:
            calls.append(1)
            raise RuntimeError("backend is broken")

        fast = magpy.compile(affine, backend=broken)
        x = torch.randn(3)
        with pytest.warns(MagPyWarning, match="backend is broken"):
            assert torch.equal(fast(x), affine(x))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert torch.equal(fast(x), affine(x))
        assert calls == [1]
        s = magpy.stats(fast)
        assert (s.records, s.fallbacks) == (0, 1)

    def test_fullgraph_raises_on_a_break(self, capsys: Any) -> None:
        """fullgraph=True turns a graph break into FullGraphError at the user's line."""

        def prints(x: torch.Tensor) -> torch.Tensor:
            print("p")
            return x

        fast = magpy.compile(prints, backend="eager", fullgraph=True)
        with pytest.raises(magpy.FullGraphError) as info:
            fast(torch.ones(1))
        capsys.readouterr()
        assert isinstance(info.value, RuntimeError)
        assert info.value.filename == prints.__code__.co_filename
        assert info.value.lineno == prints.__code__.co_firstlineno + 1


def _in_threads(n: int, work: Callable[[int], None]) -> None:
    """``work(i)`` for i in range(n), each in its own thread, started together; the errors
    they raise are re-raised here (the first), and every thread must have ended."""
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            work(i)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


class TestThreads:
    def test_four_threads_get_correct_results(self) -> None:
        """A compiled function called from 4 threads at once returns eager's results."""
        fast = magpy.compile(lambda x, y: x * y + y, backend="eager")
        leftover_tracers: list[Any] = []

        def work(i: int) -> None:
            for j in range(15):
                x = torch.full((3,), float(i))
                y = torch.full((3,), float(j))
                out = fast(x, y)
                assert torch.equal(out, x * y + y), (i, j)
            leftover_tracers.append(sys.gettrace())

        _in_threads(4, work)
        assert leftover_tracers == [None] * 4
        s = magpy.stats(fast)
        assert 1 <= s.records <= 4
        assert s.breaks == 0 and s.fallbacks == 0

    def test_four_threads_with_different_shapes(self) -> None:
        """Threads using different shapes each get a matching record and correct results.

        ``dynamic=False``: otherwise whether sizes 2..4 share one symbolic record depends on
        which thread misses first (3 or 4 records)."""
        fast = magpy.compile(affine, backend="eager", dynamic=False)

        def work(i: int) -> None:
            for _ in range(10):
                x = torch.randn(i + 1)
                assert torch.equal(fast(x), affine(x))

        _in_threads(4, work)
        # a thread may have run every call natively while others recorded (one records at a
        # time); a call per shape from here records what is missing, and then all hit
        assert magpy.stats(fast).records <= 4
        for i in range(4):
            fast(torch.randn(i + 1))
        assert magpy.stats(fast).records == 4
        hits = magpy.stats(fast).hits
        for i in range(4):
            x = torch.randn(i + 1)
            assert torch.equal(fast(x), affine(x))
        assert magpy.stats(fast).hits == hits + 4

    def test_concurrent_first_calls_make_one_record(self) -> None:
        """Eight threads call at once with the same shapes: one records, the others run
        natively meanwhile (counted in ``busy``) or hit its record; never one record each
        (which would reach ``max_records`` and turn the callable eager)."""
        fast = magpy.compile(affine, backend="eager", dynamic=False)

        def work(i: int) -> None:
            for _ in range(3):
                x = torch.randn(3)
                assert torch.equal(fast(x), affine(x))

        _in_threads(8, work)
        s = magpy.stats(fast)
        assert s.records == 1 and s.fallbacks == 0
        assert s.hits + s.busy == 8 * 3 - 1

    def test_a_recording_that_raises_lets_other_threads_record(self) -> None:
        """The user's exception in a monitored call ends that thread's recording: a later call
        from another thread records."""

        def f(x: torch.Tensor) -> torch.Tensor:
            if x.shape[0] == 1:
                raise KeyError("mine")
            return x * 2

        fast = magpy.compile(f, backend="eager", dynamic=False)
        with pytest.raises(KeyError, match="mine"):
            fast(torch.ones(1))
        out: list[torch.Tensor] = []
        t = threading.Thread(target=lambda: out.extend(fast(torch.ones(2)) for _ in range(2)))
        t.start()
        t.join(timeout=60)
        assert torch.equal(out[1], torch.ones(2) * 2)
        s = magpy.stats(fast)
        assert s.records == 1 and s.hits == 1 and s.busy == 0


class TestConfig:
    def test_from_env_reads_the_variables(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """MAGPY_MAX_RECORDS, MAGPY_VERIFY and MAGPY_LOGS are read by Config.from_env."""
        monkeypatch.setenv("MAGPY_MAX_RECORDS", "3")
        monkeypatch.setenv("MAGPY_VERIFY", "1")
        monkeypatch.setenv("MAGPY_LOGS", "guards, graphs,")
        cfg = Config.from_env()
        assert cfg.max_records == 3
        assert cfg.verify is True
        assert cfg.logs == frozenset({"guards", "graphs"})

    def test_defaults(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without variables: 8 records, no verification, no log topics."""
        for name in ("MAGPY_MAX_RECORDS", "MAGPY_VERIFY", "MAGPY_LOGS"):
            monkeypatch.delenv(name, raising=False)
        assert Config.from_env() == Config(max_records=8, verify=False, logs=frozenset())

    def test_patch_restores_fields(self) -> None:
        """config.patch changes fields inside the block only, even on error."""
        before = config.max_records
        with pytest.raises(KeyError), config.patch(max_records=before + 5):
            assert config.max_records == before + 5
            raise KeyError
        assert config.max_records == before


class TestConfigReachesThePackages:
    """Fields of ``magpy.config`` decide what the packages below the runtime do: they get the
    settings passed down and never read the environment themselves."""

    @staticmethod
    def _verify_calls(verify: bool, monkeypatch: pytest.MonkeyPatch) -> int:
        calls: list[None] = []
        real = RefGraph.verify

        def counting(self: RefGraph) -> None:
            calls.append(None)
            real(self)

        monkeypatch.delenv("MAGPY_VERIFY", raising=False)
        monkeypatch.setattr(RefGraph, "verify", counting)
        with config.patch(verify=verify):
            fast = magpy.compile(affine, backend="eager")
            assert torch.equal(fast(torch.ones(2)), affine(torch.ones(2)))
        return len(calls)

    def test_patched_verify_checks_the_graphs_of_a_capture(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """config.patch(verify=True) makes every RefGraph mutation of a capture run verify(),
        without MAGPY_VERIFY in the environment."""
        assert self._verify_calls(True, monkeypatch) > 0

    def test_verify_off_checks_nothing(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """With verify=False no capture runs verify() after its mutations."""
        assert self._verify_calls(False, monkeypatch) == 0


class TestSettings:
    """A callable's settings are one frozen ``Settings`` (its ``key()`` is the one key)."""

    def test_settings_are_one_frozen_value_and_the_fields_read_it(self) -> None:
        fast = magpy.compile(
            affine, backend="eager", dynamic=False, options={"magpy.max_records": 3}
        )
        state = fast._magpy_state
        assert isinstance(state.settings, Settings)
        assert (state.backend, state.fullgraph, state.dynamic, state.max_records) == (
            state.settings.backend,
            False,
            False,
            3,
        )
        with pytest.raises(AttributeError):
            state.settings.max_records = 4  # type: ignore[misc]
        with pytest.raises(AttributeError):
            state.max_records = 4  # type: ignore[misc]
        assert state.settings.key() == Settings(state.backend, False, False, 3).key()

    def test_a_forced_backend_is_the_same_settings_with_another_backend(self) -> None:
        state = magpy.compile(affine, backend="eager", dynamic=True)._magpy_state
        forced = state.forced("aot_eager")
        assert forced.settings == Settings("aot_eager", state.fullgraph, True, state.max_records)
