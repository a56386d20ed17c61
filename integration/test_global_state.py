"""torch's global state read inside the compiled region, and guards on it.

- ``torch.compiler.is_compiling()`` is True while MagPy records a run, as under TorchDynamo.
  Library code uses it to skip work a compiled graph does not need (transformers' mask helpers
  read a mask's values unless it is compiling). MagPy compiles what it records, so that code
  takes the same path as under ``torch.compile``; the flag is back to False outside the
  recording.
- ``torch.get_autocast_dtype``/``is_autocast_enabled``/``get_default_dtype``: constants of the
  record, guarded by reading the state again; a read after the run changed the state is a
  break. (The warning of the deprecated ``get_autocast_cpu_dtype``: ``test_warnings.py``.)
- Autocast, the default dtype and inference mode change what the recorded ops compute or make:
  a call under another state misses and records anew.

``with torch.autocast(...)`` blocks are in ``test_with_and_hooks.py``.
"""

from __future__ import annotations

import _integration_helpers as H
import torch

import magpy

# -------------------------------------------------------------------- torch.compiler.is_compiling()
SEEN: list[bool] = []


def branches_on_the_flag(x: torch.Tensor) -> torch.Tensor:
    SEEN.append(torch.compiler.is_compiling())
    if torch.compiler.is_compiling():
        return x * 2  # the path torch.compile takes
    return x * 2 + 0  # an equivalent eager-only path


def breaks_then_asks(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    print("break")
    SEEN.append(torch.compiler.is_compiling())
    return y * 2


def test_recording_takes_the_compile_path_and_restores_the_flag() -> None:
    SEEN.clear()
    compiled = magpy.compile(branches_on_the_flag, backend="eager")
    for _ in range(3):
        x = torch.randn(3)
        assert torch.equal(compiled(x), x * 2)
        assert torch.compiler.is_compiling() is False
    assert SEEN == [True, True, True]  # recorded once; the hits replay the append
    st = magpy.stats(compiled)
    assert (st.records, st.hits) == (1, 2), st
    assert branches_on_the_flag(torch.ones(1)) is not None and SEEN[-1] is False


def test_the_flag_is_restored_when_recording_stops_at_a_break(capsys: object) -> None:
    SEEN.clear()
    compiled = magpy.compile(breaks_then_asks, backend="eager")
    for _ in range(3):
        x = torch.randn(2)
        assert torch.equal(compiled(x), (x + 1) * 2)
        assert torch.compiler.is_compiling() is False
    # the first call's whole-call recording stopped at print: the rest ran natively
    assert SEEN[0] is False


# ----------------------------------------------------------------- autocast and default dtype reads
def autocast_aware(x: torch.Tensor) -> torch.Tensor:
    low = torch.get_autocast_dtype("cpu") == torch.bfloat16
    if low and torch.is_autocast_enabled("cpu"):
        return x * 2
    return x + float(torch.get_default_dtype() == torch.float64)


def test_autocast_and_default_dtype_reads_follow_the_state() -> None:
    """The reads are constants of the record, guarded by reading the state again: calling the
    compiled function inside ``torch.autocast``, or after ``set_default_dtype``, misses."""
    assert H.graphs(autocast_aware, torch.randn(3)) == (1, [])
    compiled = magpy.compile(autocast_aware, backend="eager")
    x = torch.randn(3)
    for _ in range(2):
        H.assert_same(compiled(x), autocast_aware(x))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(2):
            H.assert_same(compiled(x), autocast_aware(x))
    with torch.autocast("cpu", dtype=torch.float16):
        H.assert_same(compiled(x), autocast_aware(x))
    before = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        for _ in range(2):
            H.assert_same(compiled(x), autocast_aware(x))
    finally:
        torch.set_default_dtype(before)
    H.assert_same(compiled(x), autocast_aware(x))
    assert H.counters(compiled) == (4, 4, 0, 0)


def autocast_read_inside_a_block(x: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", enabled=False):
        on = torch.is_autocast_enabled("cpu")
    return x * 2 if on else x


def test_a_read_after_the_run_changed_the_state_breaks() -> None:
    """Inside a disabled autocast block the read does not see the state the guard checks."""
    _, reasons = H.graphs(autocast_read_inside_a_block, torch.randn(3))
    assert "reads the autocast after the run changed it" in reasons
    compiled = magpy.compile(autocast_read_inside_a_block, backend="eager")
    x = torch.randn(3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(2):
            H.assert_same(compiled(x), autocast_read_inside_a_block(x))
    assert magpy.stats(compiled).fallbacks == 0


# ---------------------------------------------------------------------- ambient state
def _matmul_and_zeros(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x @ w).relu() * 3 + torch.zeros(3)


def test_ambient_state_is_guarded() -> None:
    """Autocast, the default dtype and inference mode change what the recorded ops compute or
    make: a call under another state misses and records anew, equal to eager."""
    compiled = magpy.compile(_matmul_and_zeros, backend="eager")
    generator = torch.Generator().manual_seed(0)  # (a draw whose relu is all zeros is the same
    x = torch.randn(2, 3, generator=generator)  # in bfloat16: the check below needs values)
    w = torch.randn(3, 3, generator=generator)
    H.assert_same(compiled(x, w), _matmul_and_zeros(x, w))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = compiled(x, w), _matmul_and_zeros(x, w)
    assert torch.equal(got, want) and got.dtype == want.dtype
    assert not torch.equal(got, _matmul_and_zeros(x, w))  # bfloat16 matmul: other values
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got, want = compiled(x, w), _matmul_and_zeros(x, w)
    finally:
        torch.set_default_dtype(old)
    assert got.dtype == want.dtype == torch.float64 and torch.equal(got, want)
    with torch.inference_mode():
        got = compiled(x, w)
    assert got.is_inference()
    H.assert_same(compiled(x, w), _matmul_and_zeros(x, w))
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.misses) == (4, 1, 4), st
