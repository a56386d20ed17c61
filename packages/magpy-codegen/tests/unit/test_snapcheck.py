"""The compiled snapshot check's dict versions (``_snapcheck.c``): every mutation renews a
dict's version, on every supported interpreter (3.11's own tag; a dict watcher from 3.12)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import pytest

from magpy_codegen import _cbuild
from magpy_monitor import INTERP


@pytest.fixture(scope="module")
def version() -> Callable[[Any], int]:
    found = _cbuild.load_version()
    if found is None and _cbuild.settings().snapcheck == "python":
        pytest.skip(_cbuild.reason)
    assert found is not None, _cbuild.reason
    return found


MUTATIONS: dict[str, Callable[[dict[Any, Any]], Any]] = {
    "add": lambda d: d.__setitem__("new", 1),
    "replace": lambda d: d.__setitem__("a", object()),
    "delete": lambda d: d.__delitem__("a"),
    "pop": lambda d: d.pop("a"),
    "popitem": lambda d: d.popitem(),
    "setdefault": lambda d: d.setdefault("new", 1),
    "update": lambda d: d.update(b=3),
    "ior": lambda d: d.__ior__({"c": 4}),
    "clear": lambda d: d.clear(),
    "exec": lambda d: exec("a = 5", d),
}


@pytest.mark.parametrize("change", MUTATIONS)
def test_every_mutation_gives_a_new_version(version: Callable[[Any], int], change: str) -> None:
    d: dict[Any, Any] = {"a": 1, "b": 2}
    before = version(d)
    assert version(d) == before  # (reading changes nothing)
    MUTATIONS[change](d)
    after = version(d)
    assert after != before
    assert version(d) == after


def test_a_clone_into_an_empty_dict_gives_a_new_version(version: Callable[[Any], int]) -> None:
    d: dict[Any, Any] = {}
    before = version(d)
    d.update({"a": 1, "b": 2})  # (CPython may clone the other dict's keys: its own event)
    assert version(d) != before


def test_versions_are_never_reused(version: Callable[[Any], int]) -> None:
    """A freed dict's version is not given to the next dict (perhaps at the same address)."""
    seen = set()
    for _ in range(2000):
        d: dict[Any, Any] = {}
        seen.add(version(d))
        d["x"] = 1
        seen.add(version(d))
        del d
        gc.collect(0)
    assert len(seen) == 4000


def test_attribute_stores_renew_a_class_dict(version: Callable[[Any], int]) -> None:
    class Holder:
        x = 1

    (ns,) = gc.get_referents(Holder.__dict__)
    before = version(ns)
    Holder.x = 2
    assert version(ns) != before


def test_the_snapshot_check_reads_these_versions(version: Callable[[Any], int]) -> None:
    holds = _cbuild.load_snapcheck()
    assert holds is not None
    d: dict[Any, Any] = {"a": 1}
    state = (None, [], [], [], [d], [version(d)], [], [], [], [], [], [], [], [], [], None,
             [], [], [], ())  # fmt: skip
    assert holds(state, object())
    d["a"] = 2
    assert not holds(state, object())


class _Obj:
    def __init__(self) -> None:
        self.a = 1
        self.b: Any = None


INSTANCE_STORES: dict[str, Callable[[_Obj], Any]] = {
    "replace": lambda o: setattr(o, "a", 2),
    "add": lambda o: setattr(o, "c", 3),
    "delete": lambda o: delattr(o, "b"),
    "delete-then-add": lambda o: (delattr(o, "a"), setattr(o, "a", 1)),  # (the keys' order)
    "through-dict": lambda o: o.__dict__.__setitem__("a", 5),
    "through-setattr-slot": lambda o: object.__setattr__(o, "b", "x"),
}


def _instance_state(version: Callable[[Any], int], d: dict[str, Any]) -> tuple[Any, ...]:
    values_state = _cbuild.load_values_state()
    values = None if values_state is None else ([d], [values_state(d)])
    return (None, [], [], [], [d], [version(d)], [], [], [], [], [], [], [], [], [], values,
            [], [], [], ())  # fmt: skip


@pytest.mark.parametrize("change", INSTANCE_STORES)
def test_every_store_into_an_instance_is_seen(version: Callable[[Any], int], change: str) -> None:
    """An attribute store into an object whose values live inline (3.13: no new tag, no watcher
    event) still fails the check: the dict's version, with its values state on 3.13."""
    holds = _cbuild.load_snapcheck()
    assert holds is not None
    if not INTERP.instance_dict_tags_exact:
        assert _cbuild.load_values_state() is not None  # (the C check knows 3.13's values)
    obj = _Obj()
    state = _instance_state(version, obj.__dict__)
    assert holds(state, object())
    obj.b = None  # the same value again: nothing changed
    assert holds(state, object())
    INSTANCE_STORES[change](obj)
    assert not holds(state, object())


def test_a_values_state_of_another_shape_is_not_a_memo_state(version: Callable[[Any], int]) -> None:
    holds = _cbuild.load_snapcheck()
    assert holds is not None
    d: dict[str, Any] = {}
    state = list(_instance_state(version, d))
    state[15] = ([d], [])
    with pytest.raises(TypeError, match="memo state"):
        holds(tuple(state), object())
