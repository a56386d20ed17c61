"""``set_attribute``, the mock's ``setattr``: a plain value on a module skips
``Module.__setattr__``'s Python only where that would end in ``object.__setattr__``."""

from __future__ import annotations

from typing import Any

import pytest
from torch import nn

from magpy_codegen._mock import set_attribute


class _Mixin:
    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value * 10 if type(value) is int else value)


class _Mixed(nn.Module, _Mixin):
    pass


class _Own(nn.Module):
    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, ("own", value))


def _both(make: Any, name: str, value: Any) -> tuple[Any, Any]:
    """``(state or error)`` after ``setattr`` and after ``set_attribute`` on fresh objects."""
    out = []
    for store in (setattr, set_attribute):
        obj = make()
        try:
            store(obj, name, value)
            out.append(("ok", obj.__dict__.get(name), sorted(obj.__dict__)))
        except Exception as exc:
            out.append(("raised", type(exc), str(exc)))
    return out[0], out[1]


@pytest.mark.parametrize(
    ("make", "name", "value"),
    [
        (lambda: nn.Linear(2, 2), "shift", 3),  # the fast path
        (lambda: nn.Linear(2, 2), "weight", 3),  # a parameter: TypeError
        (lambda: nn.BatchNorm1d(2), "running_mean", 1.5),  # a buffer: TypeError
        (lambda: nn.Sequential(nn.ReLU()), "0", "x"),  # a submodule: TypeError
        (lambda: nn.Linear(2, 2), "weight", None),  # None unregisters: setattr's own path
        (_Mixed, "n", 2),  # a __setattr__ after Module in the MRO runs
        (_Own, "n", 2),  # the class's own __setattr__ runs
    ],
)
def test_set_attribute_does_what_setattr_does(make: Any, name: str, value: Any) -> None:
    eager, mock = _both(make, name, value)
    assert mock == eager


def test_a_property_setter_still_runs() -> None:
    class WithProp(nn.Module):
        @property
        def scale(self) -> int:
            return self._scale

        @scale.setter
        def scale(self, v: int) -> None:
            object.__setattr__(self, "_scale", v + 1)

    m = WithProp()
    set_attribute(m, "scale", 1)
    assert m.scale == 2
