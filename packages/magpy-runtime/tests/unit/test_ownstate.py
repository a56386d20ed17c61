"""Unit tests of _ownstate.py: what counts as a callable's own state written by a call.

(The retry it decides is tested end to end in integration/test_lazy_init.py.)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from magpy_runtime.cache._ownstate import changed, own_state

SHARED_LOG: list[int] = []
FLAG: bool = False


class Lazy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ready = False
        self.cache: dict[int, int] = {}
        self.sub = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.sub(x)


def logs(x: Any) -> Any:
    SHARED_LOG.append(1)
    return x


def sets_flag(x: Any) -> Any:
    global FLAG
    FLAG = True
    return x


def test_nothing_written_is_no_change() -> None:
    m = Lazy()
    before = own_state(m)
    m(torch.ones(2))
    assert before is not None and not changed(before)


def test_an_attribute_rebound_added_or_a_cache_filled_is_a_change() -> None:
    for write in (
        lambda m: setattr(m, "ready", True),
        lambda m: setattr(m, "width", 4),
        lambda m: m.cache.__setitem__(1, 2),
        lambda m: m.register_buffer("mask", torch.ones(2)),
        lambda m: setattr(m.sub, "lazy", True),  # a submodule's own state
        lambda m: m.sub._parameters.__setitem__("bias", None),
    ):
        m = Lazy()
        before = own_state(m)
        write(m)
        assert changed(before), write


def test_bound_method_and_function_bindings() -> None:
    m = Lazy()
    before = own_state(m.forward)
    m.ready = True
    assert changed(before)
    global FLAG
    FLAG = False
    before = own_state(sets_flag)
    sets_flag(1)
    assert changed(before)
    FLAG = False


def test_a_global_container_appended_to_is_not_own_state() -> None:
    """A log shared by every caller is no initialisation of the function."""
    before = own_state(logs)
    logs(1)
    assert not changed(before)


def test_an_unreadable_picture_changes_nothing() -> None:
    assert not changed(None)


class Watched:
    """A callable object whose class watches every attribute read."""

    reads = 0

    def __init__(self) -> None:
        self.ready = False

    def __getattribute__(self, name: str) -> Any:
        type(self).reads += 1
        return object.__getattribute__(self, name)

    def __call__(self, x: Any) -> Any:
        return x


def test_the_picture_runs_none_of_the_programs_code() -> None:
    """No ``__getattribute__`` of the program runs to take or compare it (eager would not)."""
    obj = Watched()
    Watched.reads = 0
    before = own_state(obj)
    assert not changed(before) and Watched.reads == 0
    object.__setattr__(obj, "ready", True)
    assert changed(before) and Watched.reads == 0
