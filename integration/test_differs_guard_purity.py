"""Never differs from eager: the guard runs no user Python (issue 17, class 4).

A guard reads state through ``__dict__``, type slots and builtin operations only; a user
``__getattr__``, property, ``__eq__``, ``__hash__``, ``__len__`` or ``__iter__`` runs as often
as in eager (counted here), never once more per call for checking.
"""

from __future__ import annotations

import _integration_differential as D
import torch

case = D.case
CALLS: dict[str, int] = {}


def _count(name: str) -> None:
    CALLS[name] = CALLS.get(name, 0) + 1


class EqCounting(str):
    def __eq__(self, other: object) -> bool:
        _count("eq")
        return str.__eq__(self, other)

    __hash__ = str.__hash__


class Key:
    def __init__(self, k: int) -> None:
        self.k = k

    def __eq__(self, other: object) -> bool:
        _count("key_eq")
        return isinstance(other, Key) and other.k == self.k

    def __hash__(self) -> int:
        _count("key_hash")
        return hash(self.k)


class LenCounting(list):  # type: ignore[type-arg]
    def __len__(self) -> int:
        _count("len")
        return list.__len__(self)


class Cfg:
    def __init__(self, scale: float) -> None:
        self.scale = scale

    def __getattr__(self, name: str) -> float:
        _count("getattr")
        return 1.0


def _calls(w: D.World, f, args_list):  # type: ignore[no-untyped-def]
    CALLS.clear()
    cf = w.compile(f)
    out = [w.attempt(lambda a=a: cf(*a)) for a in args_list]
    return out, dict(CALLS)


@case("guard_purity", inductor=True)
def getattr_not_called_for_present_attr(w: D.World) -> object:
    def f(x, c):
        return x * c.scale

    c = Cfg(2.0)
    return _calls(w, f, [(torch.ones(2), c)] * 4)


@case("guard_purity")
def getattr_counted_for_missing_attr(w: D.World) -> object:
    def f(x, c):
        return x * c.scale

    c = Cfg(2.0)
    del c.scale
    return _calls(w, f, [(torch.ones(2), c)] * 3)


@case("guard_purity", inductor=True)
def str_subclass_eq_not_called(w: D.World) -> object:
    def f(x, s):
        return x + len(s)

    s = EqCounting("ab")
    return _calls(w, f, [(torch.ones(2), s)] * 4)


@case("guard_purity")
def user_key_dict_hash_eq(w: D.World) -> object:
    def f(x, d):
        return x + len(d)

    d = {Key(1): 1}
    return _calls(w, f, [(torch.ones(2), d)] * 4)


@case("guard_purity")
def list_subclass_len(w: D.World) -> object:
    def f(x, xs):
        return x * len(xs)

    xs = LenCounting([1, 2])
    return _calls(w, f, [(torch.ones(2), xs)] * 4)


@case("guard_purity")
def property_counted(w: D.World) -> object:
    class P:
        def __init__(self) -> None:
            self._v = 3.0

        @property
        def v(self) -> float:
            _count("prop")
            return self._v

    def f(x, p):
        return x * p.v

    p = P()
    return _calls(w, f, [(torch.ones(2), p)] * 4)


@case("guard_purity")
def descriptor_get_counted(w: D.World) -> object:
    class Desc:
        def __get__(self, obj: object, owner: object = None) -> float:
            _count("get")
            return 2.0

    class Holder:
        d = Desc()

    def f(x, o):
        return x + o.d

    o = Holder()
    return _calls(w, f, [(torch.ones(2), o)] * 4)


@case("guard_purity")
def dict_subclass_iter(w: D.World) -> object:
    class D2(dict):  # type: ignore[type-arg]
        def __iter__(self):  # type: ignore[no-untyped-def]
            _count("iter")
            return dict.__iter__(self)

    def f(x, d):
        return x * d["a"]

    d = D2(a=2.0)
    return _calls(w, f, [(torch.ones(2), d)] * 4)


@case("guard_purity")
def int_subclass_eq(w: D.World) -> object:
    class I(int):  # noqa: E742
        def __eq__(self, other: object) -> bool:
            _count("int_eq")
            return int.__eq__(self, other)

        __hash__ = int.__hash__

    def f(x, k):
        return x * k

    k = I(3)
    return _calls(w, f, [(torch.ones(2), k)] * 4)


@case("guard_purity")
def tuple_of_str_subclass(w: D.World) -> object:
    def f(x, t):
        return x + len(t[0])

    t = (EqCounting("abc"), 1)
    return _calls(w, f, [(torch.ones(2), t)] * 4)


@case("guard_purity")
def hasattr_getattr_counted(w: D.World) -> object:
    def f(x, c):
        return x * (2 if hasattr(c, "scale") else 3)

    c = Cfg(2.0)
    return _calls(w, f, [(torch.ones(2), c)] * 4)


@case("guard_purity")
def dict_key_str_subclass(w: D.World) -> object:
    def f(x, d):
        return x + len(d), list(d)

    d = {EqCounting("a"): 1.0}
    return _calls(w, f, [(torch.ones(2), d)] * 4)


@case("guard_purity")
def slots_object_attr(w: D.World) -> object:
    class S:
        __slots__ = ("v",)

        def __init__(self) -> None:
            self.v = 2.0

        def __getattr__(self, name: str) -> float:
            _count("slots_getattr")
            return 0.0

    def f(x, o):
        return x * o.v

    o = S()
    out = _calls(w, f, [(torch.ones(2), o)] * 3)
    o.v = 5.0
    return out, _calls(w, f, [(torch.ones(2), o)] * 2)


@case("guard_purity")
def getattr_state_change_between_calls(w: D.World) -> object:
    def f(x, c):
        return x * c.scale

    c = Cfg(2.0)
    first = _calls(w, f, [(torch.ones(2), c)] * 2)
    c.scale = 4.0
    return first, _calls(w, f, [(torch.ones(2), c)] * 2)


test_eager, test_inductor = D.tests(__name__)
