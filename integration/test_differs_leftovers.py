"""Never differs from eager: leftovers of issue 35 (classes 3 and 6).

An ``OrderedDict`` reordered between calls (``move_to_end`` leaves the dict's own version and
``dict.keys`` order as they were), an ``lru_cache``'d callee whose cache is cleared, or whose
``cache_info()`` the program reads, and ``sorted``/``max`` with a key that reads state; a
``catch_warnings`` block, whose entry, filter calls and exit reset every warning registry; a dict
key whose Python ``__hash__``/``__eq__`` reads state (dicts run it natively), and ``in``,
``==`` and ``sorted`` over items whose ``__eq__``/``__lt__`` do.
"""

from __future__ import annotations

import collections
import functools
import warnings

import _integration_differential as D
import torch

case = D.case


def _x() -> torch.Tensor:
    return torch.arange(4, dtype=torch.float32) - 1.5


@case("leftovers", inductor=True)
def ordered_dict_move_to_end(w: D.World) -> object:
    od = collections.OrderedDict(a=1.0, b=2.0, c=3.0)

    def f(x: torch.Tensor) -> torch.Tensor:
        out = x
        for k, v in od.items():
            out = out * v + len(k)
        return out

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    od.move_to_end("a")
    outs += [cf(_x()), cf(_x())]
    od.move_to_end("c", last=False)
    outs += [cf(_x()), cf(_x())]
    return outs


@case("leftovers")
def ordered_dict_keys_in_a_list(w: D.World) -> object:
    od = collections.OrderedDict(x=1, y=2)

    def f(x: torch.Tensor) -> object:
        return x * od["x"], list(od)

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    od.move_to_end("x")
    outs += [cf(_x()), cf(_x())]
    return outs


@case("leftovers")
def lru_cache_info_counts_hits(w: D.World) -> object:
    @functools.lru_cache(maxsize=32)
    def scale(n: int) -> int:
        return n * 2

    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return x * scale(n)

    cf = w.compile(f)
    outs = [cf(_x(), 3) for _ in range(4)]
    return outs, tuple(scale.cache_info())


_FACTOR = {"k": 2}


@case("leftovers")
def lru_cache_cleared_reads_anew(w: D.World) -> object:
    @functools.lru_cache(maxsize=32)
    def factor(name: str) -> int:
        return _FACTOR[name]

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * factor("k")

    try:
        cf = w.compile(f)
        outs = [cf(_x()), cf(_x())]
        _FACTOR["k"] = 5
        outs += [cf(_x())]  # (still cached: eager gives the old factor too)
        factor.cache_clear()
        outs += [cf(_x()), cf(_x())]
    finally:
        _FACTOR["k"] = 2
    # (not cache_info(): after the miss, each record's guard asks the cache once, counted)
    return outs


_WEIGHTS = {"a": 1, "b": 2, "c": 3}


@case("leftovers")
def sorted_with_a_key_reading_state(w: D.World) -> object:
    names = ["a", "b", "c"]

    def f(x: torch.Tensor) -> torch.Tensor:
        order = sorted(names, key=lambda n: _WEIGHTS[n])
        return x * len(order[0]) + float(ord(order[0]))

    try:
        cf = w.compile(f)
        outs = [cf(_x()), cf(_x())]
        _WEIGHTS["c"] = -1
        outs += [cf(_x()), cf(_x())]
    finally:
        _WEIGHTS["c"] = 3
    return outs


@case("leftovers")
def max_with_a_key_reading_state(w: D.World) -> object:
    names = ["a", "b", "c"]

    def f(x: torch.Tensor) -> torch.Tensor:
        best = max(names, key=lambda n: _WEIGHTS[n])
        return x + float(ord(best))

    try:
        cf = w.compile(f)
        outs = [cf(_x()), cf(_x())]
        _WEIGHTS["a"] = 10
        outs += [cf(_x()), cf(_x())]
    finally:
        _WEIGHTS["a"] = 1
    return outs


class _OD(collections.OrderedDict):  # (a subclass adding nothing: its order is OrderedDict's)
    pass


class _ModelOutput(collections.OrderedDict):
    """Like transformers' ``ModelOutput``: an ``OrderedDict`` subclass with Python item methods."""

    def __getitem__(self, key: object) -> object:
        if isinstance(key, str):
            return dict(self.items())[key]
        return list(self.values())[key]  # type: ignore[index]

    def __setitem__(self, key: object, value: object) -> None:
        super().__setitem__(key, value)


@case("leftovers")
def ordered_dict_subclass_move_to_end(w: D.World) -> object:
    od = _OD(a=1.0, b=2.0, c=3.0)

    def f(x: torch.Tensor) -> object:
        out = x
        for k, v in od.items():
            out = out * v + len(k)
        return out, list(od.keys()), list(od.values())

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    od.move_to_end("a")
    outs += [cf(_x()), cf(_x())]
    od.move_to_end("c", last=False)
    outs += [cf(_x()), cf(_x())]
    return outs


@case("leftovers")
def ordered_dict_model_output_move_to_end(w: D.World) -> object:
    mo = _ModelOutput()
    mo["logits"] = 2.0
    mo["loss"] = 3.0

    def f(x: torch.Tensor) -> object:
        out = x
        for v in mo.values():
            out = out * v + 1
        return out, list(mo), tuple(mo.items())

    cf = w.compile(f)
    outs = [cf(_x()), cf(_x())]
    mo.move_to_end("logits")
    outs += [cf(_x()), cf(_x())]
    mo.move_to_end("logits", last=False)
    outs += [cf(_x()), cf(_x())]
    return outs


def _filters() -> list[tuple[object, ...]]:
    """What a program sees of ``warnings.filters``: each entry's action, message and module
    patterns (their text), category and line."""
    return [
        (a, getattr(msg, "pattern", msg), cat, getattr(mod, "pattern", mod), line)
        for a, msg, cat, mod, line in warnings.filters
    ]


def _warns(x: torch.Tensor) -> torch.Tensor:
    warnings.warn("inside the block", UserWarning, stacklevel=1)
    return x + 1


@case("leftovers")
def catch_warnings_simplefilter_ignore_leaves_the_filters(w: D.World) -> object:
    def f(x: torch.Tensor) -> object:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = x * 2
            seen = (len(warnings.filters), warnings.filters[0][0])
        return y + 1, seen

    cf = w.compile(f)
    before = warnings.filters
    outs = []
    for _ in range(4):
        outs.append((cf(_x()), _filters(), warnings.filters is before))
    return outs


@case("leftovers")
def catch_warnings_filterwarnings_inside(w: D.World) -> object:
    def f(x: torch.Tensor) -> object:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="inside", category=UserWarning)
            warnings.simplefilter("always", DeprecationWarning)
            y = x - 1
            seen = _filters()
        return y, seen

    cf = w.compile(f)
    before = warnings.filters
    return [(cf(_x()), _filters(), warnings.filters is before) for _ in range(4)]


@case("leftovers")
def catch_warnings_record_true(w: D.World) -> object:
    def f(x: torch.Tensor) -> object:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = x * 3
            seen = len(warnings.filters)
        return y, seen, len(caught)

    cf = w.compile(f)
    before = warnings.filters
    return [(cf(_x()), _filters(), warnings.filters is before) for _ in range(4)]


@case("leftovers")
def catch_warnings_ignores_a_warning_inside(w: D.World) -> object:
    def f(x: torch.Tensor) -> object:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = _warns(x)
        return y * 2

    cf = w.compile(f)
    before = warnings.filters
    return [(cf(_x()), _filters(), warnings.filters is before) for _ in range(4)]


def _warn_outside() -> None:
    warnings.warn("after the call", UserWarning, stacklevel=1)  # (one place: its registry entry)


@case("leftovers", hits=3)
def catch_warnings_block_resets_the_registries_on_every_call(w: D.World) -> object:
    """Entering and leaving ``catch_warnings`` (and each filter call in it) forgets what every
    ``__warningregistry__`` has shown: under "default" a warning the program issues after each
    call, at one place, shows after every call, cache hits included."""

    def f(x: torch.Tensor) -> torch.Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = x * 2
        return y + 1

    cf = w.compile(f)
    outs = []
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        for _ in range(4):
            outs.append(cf(_x()))
            _warn_outside()
    return outs


@case("leftovers", hits=3)
def catch_warnings_action_argument_resets_the_registries(w: D.World) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        with warnings.catch_warnings(action="ignore", category=UserWarning):
            y = x - 3
        return y

    cf = w.compile(f)
    outs = []
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        for _ in range(4):
            outs.append(cf(_x()))
            _warn_outside()
    return outs


_MATCH = {"on": False}


class _Tag:
    """A key whose ``__eq__`` reads state: dicts run it natively while they look a key up."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __hash__(self) -> int:
        return hash(self.n)

    def __eq__(self, other: object) -> bool:
        return _MATCH["on"] if isinstance(other, _Tag) else NotImplemented


def _flip_between_calls(cf: object, *args: object) -> list[object]:
    """Four calls of ``cf(x, *args)``; the keys start to compare equal before the third."""
    outs = []
    try:
        for i in range(4):
            _MATCH["on"] = i >= 2
            outs.append(cf(_x(), *args))  # type: ignore[operator]
    finally:
        _MATCH["on"] = False
    return outs


@case("leftovers")
def python_hashed_key_dict_get(w: D.World) -> object:
    a, b = _Tag(1), _Tag(1)
    table = {a: 3.0}

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * table.get(b, 7.0)

    return _flip_between_calls(w.compile(f))


@case("leftovers")
def python_hashed_key_dict_display_and_store(w: D.World) -> object:
    a, b = _Tag(1), _Tag(1)

    def f(x: torch.Tensor) -> object:
        built = {a: 1.0, b: 2.0}
        stored = {a: 1.0}
        stored[b] = 4.0
        made = dict([(a, 1.0), (b, 2.0)])
        return x * len(built), len(stored), len(made), list(stored.values())

    return _flip_between_calls(w.compile(f))


@case("leftovers")
def python_hashed_key_pop_and_setdefault(w: D.World) -> object:
    a, b = _Tag(1), _Tag(1)

    def f(x: torch.Tensor) -> object:
        d = {a: 3.0}
        e = collections.OrderedDict([(a, 3.0)])
        return x * d.pop(b, 9.0), e.setdefault(b, 5.0), len(e)

    return _flip_between_calls(w.compile(f))


class _Rank:
    """Items whose ``__eq__``/``__lt__`` read state: ``in``, ``==`` and ``sorted`` over a list
    or tuple of them run those natively."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __eq__(self, other: object) -> bool:
        return _MATCH["on"] if isinstance(other, _Rank) else NotImplemented

    def __lt__(self, other: _Rank) -> bool:
        return (self.n > other.n) if _MATCH["on"] else (self.n < other.n)

    __hash__ = object.__hash__


@case("leftovers")
def python_eq_items_in_a_list(w: D.World) -> object:
    a, b = _Rank(1), _Rank(2)
    held = [a]

    def f(x: torch.Tensor) -> object:
        return x * (b in held), b in (a,), (a,) == (b,), [a, _Rank(3)].count(b)

    return _flip_between_calls(w.compile(f))


@case("leftovers")
def python_lt_items_sorted(w: D.World) -> object:
    a, b = _Rank(1), _Rank(2)

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * sorted([a, b])[0].n

    return _flip_between_calls(w.compile(f))


@case("leftovers")
def python_eq_items_list_remove(w: D.World) -> object:
    a, b = _Rank(1), _Rank(2)

    def f(x: torch.Tensor) -> torch.Tensor:
        items = [a, _Rank(3)]
        if b in items:
            items.remove(b)
        return x * len(items)

    return _flip_between_calls(w.compile(f))


test_eager, test_inductor = D.tests(__name__)
