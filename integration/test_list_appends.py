"""Appends to pre-existing lists: replayed as appends, without guarding the list's contents."""

from __future__ import annotations

import _integration_helpers as H
import torch

import magpy


def append_outputs(x: torch.Tensor, out: list[torch.Tensor]) -> torch.Tensor:
    y = x * 2
    out.append(y)
    out.append(y + 1)
    return y.sum()


def append_then_read(x: torch.Tensor, out: list[torch.Tensor]) -> int:
    out.append(x * 2)
    return len(out)  # reads the list: its length at entry is guarded


def append_then_stack(x: torch.Tensor, out: list[torch.Tensor]) -> torch.Tensor:
    out.append(x + 1)
    return torch.stack(out).sum(0)


def test_appends_to_a_list_of_any_length_share_one_record() -> None:
    """One record serves lists of every length; the appended tensors equal eager's."""
    compiled = magpy.compile(append_outputs, backend="eager")
    for n in range(5):
        got_list = [torch.zeros(2)] * n
        want_list = list(got_list)
        x = torch.randn(2)
        H.assert_same(compiled(x, got_list), append_outputs(x, want_list))
        H.assert_same(got_list, want_list, f"call {n}")
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.misses) == (1, 4, 1), st


def test_a_list_read_after_appending_is_guarded_by_its_length() -> None:
    """Reading the list after appending guards its entry length, each record giving eager's
    result (a record for one length never answers for another). Its ``len()``, once a miss
    saw the length change, is the entry length plus what was appended (``core.growing``): two
    records, the second serving every length. Stacking it joins what it held at entry (one
    tensor of a dynamic length: two records too) and the appended tensors."""
    for fn, want in ((append_then_read, (2, 3)), (append_then_stack, (2, 3))):
        compiled = magpy.compile(fn, backend="eager")
        for n in (1, 2, 1, 2, 3):
            got_list = [torch.ones(2) * i for i in range(n)]
            want_list = list(got_list)
            x = torch.randn(2)
            H.assert_same(compiled(x, got_list), fn(x, want_list))
            H.assert_same(got_list, want_list, f"{fn.__name__} with {n}")
        st = magpy.stats(compiled)
        assert (st.records, st.hits) == want, (fn.__name__, st)


def test_appended_list_aliasing_the_output() -> None:
    """The appended tensor is the very object returned when the program returns it."""

    def f(x: torch.Tensor, out: list[torch.Tensor]) -> torch.Tensor:
        y = x.relu()
        out.append(y)
        return y

    compiled = magpy.compile(f, backend="eager")
    for _ in range(3):
        out: list[torch.Tensor] = []
        y = compiled(torch.randn(3), out)
        assert out[0] is y
    assert magpy.stats(compiled).hits == 2
