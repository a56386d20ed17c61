"""The share of run time outside compiled graphs (issue 19: no silent performance cliff after
a break): ``magpy.stats(fn).outside_share`` and one warning once most of the time of several
calls runs uncompiled."""

from __future__ import annotations

import select
import warnings

import _integration_helpers as H
import pytest
import torch

import magpy


def mostly_native(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    # native code without an annotation: a break, run natively for 10 ms (``time.sleep`` was
    # the example here; the mock now replays it, so it no longer breaks: ``test_stdlib.py``)
    select.select([], [], [], 0.01)
    return y + 1


def all_in_a_graph(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ x.T).sum(0) * 2


def test_a_call_that_runs_mostly_natively_is_measured_and_warned_about_once() -> None:
    compiled = magpy.compile(mostly_native, backend="eager")
    with pytest.warns(magpy.MagPyWarning, match=r"outside compiled graphs \(.*select") as seen:
        for _ in range(8):
            x = torch.randn(4)
            H.assert_same(compiled(x), mostly_native(x))
    assert sum("outside compiled graphs" in str(w.message) for w in seen) == 1
    st = magpy.stats(compiled)
    assert st.breaks >= 1 and st.native_calls >= 5 and st.outside_share > 0.5, st


def test_a_whole_graph_has_nothing_outside_and_no_warning() -> None:
    compiled = magpy.compile(all_in_a_graph, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", magpy.MagPyWarning)
        for _ in range(8):
            x = torch.randn(16, 16)
            H.assert_same(compiled(x), all_in_a_graph(x))
    st = magpy.stats(compiled)
    assert (st.records, st.native_calls, st.outside_share) == (1, 0, 0.0), st


def test_reset_forgets_the_measurements() -> None:
    compiled = magpy.compile(mostly_native, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", magpy.MagPyWarning)
        for _ in range(3):
            compiled(torch.randn(4))
    assert magpy.stats(compiled).native_calls > 0
    magpy.reset()
    st = magpy.stats(compiled)
    assert (st.native_calls, st.outside_share) == (0, 0.0), st
