"""``torch.compiler.is_compiling()`` is True while MagPy records a run, as under TorchDynamo.

Library code uses it to skip work a compiled graph does not need (transformers' mask helpers
read a mask's values unless it is compiling). MagPy compiles what it records, so that code takes
the same path as under ``torch.compile``; the flag is back to False outside the recording.
"""

from __future__ import annotations

import torch

import magpy

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
