"""Shadow values and their typed payloads (core/values.py)."""

from __future__ import annotations

import pytest

from magpy_monitor.bytecode.iteration import IteratorState, LazyRange
from magpy_monitor.core.shapes import SymInt
from magpy_monitor.core.speculation import Speculated
from magpy_monitor.core.values import BoundMethod, Payload, ScalarFx, Val
from magpy_monitor.pyobj.contexts import PythonExit
from magpy_refgraph import InternalError


def test_payload_is_read_by_its_kind() -> None:
    """``payload(Kind)`` gives the payload only when it is a ``Kind`` (or a subclass of it)."""
    base = Val(object())
    it = Val(iter([]), payload=IteratorState([], base))
    assert isinstance(it.payload(IteratorState), IteratorState)
    assert it.payload(LazyRange) is None
    assert it.payload(Payload) is it.payload(IteratorState)
    assert Val(1).payload(Payload) is None
    exit_ = Val(print, payload=PythonExit(base))
    bound = exit_.payload(BoundMethod)
    assert bound is not None and bound.self_val is base  # a PythonExit is a bound method
    for kind in (SymInt, Speculated):
        v = Val(3, payload=kind(None, "s"))
        assert v.payload(ScalarFx) is not None and type(v.payload(Payload)) is kind


def test_require_and_set_payload() -> None:
    """``require`` refuses another kind; ``set_payload(None)`` drops the payload."""
    v = Val(2, payload=ScalarFx(None))
    assert v.require(ScalarFx).fx is None
    with pytest.raises(InternalError):
        v.require(SymInt)
    v.set_payload(None)
    assert v.payload(ScalarFx) is None
    assert not hasattr(v, "__dict__")  # still slotted
