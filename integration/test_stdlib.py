"""Pure standard-library calls and ``global`` writes stay inside one graph.

``json.loads``, ``hashlib``, ``zlib.crc32``, ``struct`` and ``copy`` of plain data run at record
time: their inputs are guarded and their results are constants of the record (TorchDynamo 2.13
breaks the graph on each). ``global g; g = ...`` is a write the mock replays. Also:
``abs``/``pow`` of a tensor (tensor ops), ``logging`` at a disabled level (free), and
``os.environ.get`` of a missing variable; ``time.sleep(s)``, which the mock replays.

numpy (an array from outside is not a constant either): ``test_numpy.py``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import struct
import time
import zlib
from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import pytest
import torch

import magpy

CONFIG = '{"scale": 2.0, "shift": [1, 2, 3]}'
CALLS = 0
LAST: Any = None


def from_json(x: torch.Tensor) -> torch.Tensor:
    cfg = json.loads(CONFIG)
    return x * cfg["scale"] + cfg["shift"][2]


def from_hashes(x: torch.Tensor) -> torch.Tensor:
    h = hashlib.sha256(CONFIG.encode())
    h.update(b"salt")
    return x + (int(h.hexdigest()[:4], 16) % 7) + zlib.crc32(CONFIG.encode()) % 5


def from_struct(x: torch.Tensor) -> torch.Tensor:
    (a, b) = struct.unpack("<fi", struct.pack("<fi", 1.5, 3))
    return x * a + b


def from_copies(x: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
    base = json.loads(CONFIG)
    mine = copy.deepcopy(base)
    mine["shift"].append(4)
    return x + len(mine["shift"]), mine


def counts_calls(x: torch.Tensor) -> torch.Tensor:
    global CALLS, LAST
    CALLS += 1
    LAST = x * 2
    return LAST + 1


CASES: dict[str, Callable[..., Any]] = {
    "json": from_json,
    "hashlib_zlib": from_hashes,
    "struct": from_struct,
    "copy": from_copies,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_pure_stdlib_calls_are_constants_of_one_graph(name: str) -> None:
    fn = CASES[name]
    explained = magpy.explain(fn)(torch.randn(3))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), str(explained)
    compiled = magpy.compile(fn, backend="eager")
    outs = []
    for _ in range(3):
        x = torch.randn(3)
        got = compiled(x)
        H.assert_same(got, fn(x))
        outs.append(got)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 2, 0), st
    if name == "copy":  # every call hands out a fresh dict, as deepcopy does
        assert outs[1][1] is not outs[2][1] and outs[1][1] == outs[2][1]


def test_a_changed_input_of_a_pure_call_misses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guarded input (the JSON text) changing makes a new record with the new value."""
    compiled = magpy.compile(from_json, backend="eager")
    x = torch.ones(2)
    H.assert_same(compiled(x), from_json(x))
    monkeypatch.setitem(from_json.__globals__, "CONFIG", '{"scale": 5.0, "shift": [0, 0, 7]}')
    H.assert_same(compiled(x), x * 5.0 + 7)
    assert magpy.stats(compiled).records == 2


def test_global_writes_are_replayed() -> None:
    """``global`` rebinding: the counter and the stored tensor equal eager's after every call."""
    global CALLS
    compiled = magpy.compile(counts_calls, backend="eager")
    CALLS = 0
    for i in range(4):
        x = torch.randn(2)
        got = compiled(x)
        H.assert_same(got, x * 2 + 1)
        assert i + 1 == CALLS
        H.assert_same(LAST, x * 2)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 3, 0), st


def builtins_on_tensors(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return abs(x - y).sum() + pow(x, 2).sum() + pow(2, y).mean() + abs(y.mean()) * 2


def test_abs_and_pow_of_a_tensor_are_tensor_ops() -> None:
    """``abs(t)`` and ``pow(t, e)`` call the tensor's own method: graph ops, not value reads."""
    ex = magpy.explain(builtins_on_tensors)(torch.randn(4), torch.randn(4))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), str(ex)
    H.assert_compiles_like_eager(
        builtins_on_tensors, lambda i: ([torch.randn(4), torch.randn(4)], {}), calls=4
    )


def _one_record_serves_three_calls(compiled: Any, expected: Callable[[Any], Any]) -> None:
    for _ in range(3):
        x = torch.randn(3)
        assert torch.equal(compiled(x), expected(x))
    stats = magpy.stats(compiled)
    assert (stats.records, stats.hits, stats.breaks) == (1, 2, 0), stats


# ---------------------------------------------------------------------- logging
_LOG = logging.getLogger("magpy.tests.disabled")


def logs_at_debug(x: torch.Tensor) -> torch.Tensor:
    _LOG.debug("input of shape %s", tuple(x.shape))
    return x * 2


def test_logging_at_a_disabled_level_is_free() -> None:
    """``logger.debug`` at a disabled level: no break even on a cold logger cache (where
    ``isEnabledFor`` takes the logging lock); enabling the level is a miss that logs."""
    _LOG.setLevel(logging.INFO)  # (clears the logger's cache: the first call takes the lock)
    assert magpy.explain(logs_at_debug)(torch.randn(3)).graph_count == 1
    _LOG.setLevel(logging.INFO)
    compiled = magpy.compile(logs_at_debug, backend="eager")
    _one_record_serves_three_calls(compiled, lambda x: x * 2)
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    _LOG.addHandler(handler)
    try:
        _LOG.setLevel(logging.DEBUG)
        compiled(torch.randn(3))
        assert seen == ["input of shape (3,)"]
    finally:
        _LOG.removeHandler(handler)
        _LOG.setLevel(logging.NOTSET)


# ---------------------------------------------------------------------- os.environ
def reads_environment(x: torch.Tensor) -> torch.Tensor:
    scale = float(os.environ.get("MAGPY_TEST_UNSET_SCALE", "2.0"))
    return x * scale


def test_os_environ_get_of_a_missing_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """``os.environ.get`` of a missing variable: its ``KeyError`` is raised and handled inside
    ``os.py`` (a RERAISE the monitor follows); setting the variable later is a miss."""
    monkeypatch.delenv("MAGPY_TEST_UNSET_SCALE", raising=False)
    compiled = magpy.compile(reads_environment, backend="eager")
    _one_record_serves_three_calls(compiled, lambda x: x * 2.0)
    monkeypatch.setenv("MAGPY_TEST_UNSET_SCALE", "3.0")
    x = torch.randn(3)
    assert torch.equal(compiled(x), x * 3.0)


# ---------------------------------------------------------------------- time.sleep
def paced(x: torch.Tensor, pause: float) -> torch.Tensor:
    y = x + 1
    time.sleep(pause)  # rate limiting, a "simulated latency" in a test model
    return y * 2


def test_time_sleep_is_replayed_on_every_hit() -> None:
    """``time.sleep(s)`` changes nothing the program can see but the time a call takes: one
    graph, and the mock sleeps for the same time on every hit; another duration (guarded by
    value) is another record."""
    ex = H.explain_quietly(paced, torch.randn(3), 0.01)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), H.break_text(ex)
    compiled = magpy.compile(paced, backend="eager")
    for pause in (0.05, 0.05, 0.05, 0.0, 0.0):
        x = torch.randn(3)
        start = time.perf_counter()
        got = compiled(x, pause)
        took = time.perf_counter() - start
        H.assert_same(got, paced(x, pause))
        assert took >= pause, (took, pause)
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (2, 3, 0), st
