"""MagPy's own work at a site never monitors or serves MagPy's own frames.

After a graph break, the functions on the broken call chain get entry sites. If one of those
functions is one MagPy itself calls while it works at a site (``dis.get_instructions`` decodes
every monitored frame), a site reached from MagPy's own frames once recursed until
``RecursionError``, and the monitor started on MagPy's own frame stayed installed as the
thread's trace function after the compiled call returned.
"""

from __future__ import annotations

import dis
import sys
import warnings

import pytest
import torch

import magpy

_real_get_instructions = dis.get_instructions


def _other(a):
    return a + 1


def _uses_dis(x):
    y = x * 2
    print("a break")  # (print: a graph break)
    return y + 1, len(list(dis.get_instructions(_other.__code__)))


def _program_wrapper(x, **kwargs):
    """A function of the program's own that MagPy calls too (it replaces ``dis``'s)."""
    print("a break in the wrapper")
    return _real_get_instructions(x, **kwargs)


def _run(fn, calls=4):
    magpy.reset()
    compiled = magpy.compile(fn, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", magpy.MagPyWarning)
        for i in range(calls):
            x = torch.randn(3)
            got, want = compiled(x), fn(x)
            assert sys.gettrace() is None, f"call {i} left a trace function"
            torch.testing.assert_close(got[0], want[0])
            assert got[1] == want[1]
    return magpy.stats(compiled)


def test_standard_library_function_after_a_break():
    st = _run(_uses_dis)
    assert st.fallbacks == 0
    assert st.hits >= 2  # the segment before the break is served from call 2 on


def test_program_function_that_magpy_itself_calls(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(dis, "get_instructions", _program_wrapper)
    st = _run(_uses_dis)
    assert st.fallbacks == 0
    assert st.hits >= 2
