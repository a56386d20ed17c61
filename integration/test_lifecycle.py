"""The life of a compiled callable around the program: reset, copies, containers, frames.

- ``magpy.reset()`` called inside a compiled call (whole-call mode and split mode), or from
  another thread while a call runs: that call finishes as eager would, the next calls record
  and hit again, and a frame that outlives the reset never takes another function's record.
- ``copy.deepcopy``, ``copy.copy`` and ``pickle`` of a compiled module (before and after its
  first call, also after it split at a break) give a compiled module of the copy with a cache
  of its own; a compiled function copies like a function and pickles by reference.
- A compiled ``Sequential``/``ModuleList``/``ModuleDict`` forwards ``len``, indexing, slicing,
  ``iter``, ``in``, ``reversed`` and item assignment to the original, whose submodules it
  returns; a compiled ``Linear`` has none of these protocols, as the ``Linear``.
- Frames: one MagPy frame between the caller and the function on native calls, two while a
  call is monitored; recursion reaches exactly eager's depth on native calls, and a monitored
  call records where eager's recursion still fits; the recursion limit is the program's after
  every call.
- ``warnings.warn(..., stacklevel=2)`` in a compiled function names the calling line, and the
  default filter shows it once per calling line, as in eager (whole-call mode, split mode,
  modules).
"""

from __future__ import annotations

import collections.abc
import copy
import pickle
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

import _integration_helpers as H
import pytest
import torch
import torch.fx.experimental.symbolic_shapes  # (imported now: its sympy import sets filters)
from torch import nn

import magpy

LOG: list[str] = []


def note(text: str) -> None:
    """An effect MagPy does not follow (a graph break): appends to ``LOG``."""
    LOG.append(text)


magpy.annotate(note, effect=True)


@pytest.fixture(autouse=True)
def _clear_log() -> None:
    LOG.clear()


def _stats(compiled: Any) -> tuple[int, int]:
    st = magpy.stats(compiled)
    return st.records, st.hits


# ---------------------------------------------------------------------- reset during a call
def _instrumented_magpy_functions() -> list[str]:
    """MagPy's own functions whose code was swapped for an instrumented copy (never)."""
    found = []
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] not in ("magpy", "magpy_runtime", "magpy_monitor", "magpy_codegen"):
            continue
        for obj in list(vars(module).values()):
            funcs = [obj, *vars(obj).values()] if isinstance(obj, type) else [obj]
            for f in funcs:
                code = getattr(f, "__code__", None)
                if code is not None and "__magpy_site" in code.co_names:
                    found.append(f"{name}.{getattr(f, '__qualname__', '?')}")
    return found


def resets_when_asked(x: torch.Tensor, now: bool) -> torch.Tensor:
    y = x * 2
    if now:
        magpy.reset()
    return y + 1


def resets_after_a_break(x: torch.Tensor, now: bool) -> torch.Tensor:
    y = x * 2
    note("between")
    if now:
        magpy.reset()
    return y - 1


@pytest.mark.parametrize("fn", [resets_when_asked, resets_after_a_break], ids=lambda f: f.__name__)
def test_reset_inside_a_compiled_call_finishes_it_and_the_next_calls_record_and_hit(
    fn: Callable[..., Any],
) -> None:
    """A call that resets returns eager's result; the calls after it record and hit again,
    also after a second reset inside (the first one split the function at the break)."""
    compiled = magpy.compile(fn, backend="eager")
    x = torch.randn(3)
    for now in (False, False, False, True, False, False, True):
        H.assert_same(compiled(x, now), fn(x, False))  # (the result does not depend on now)
        assert _instrumented_magpy_functions() == []
    assert _stats(compiled) == (0, 0)
    for _ in range(4):
        H.assert_same(compiled(x, False), fn(x, False))
    records, hits = _stats(compiled)
    assert records >= 1 and hits >= 2, (records, hits)
    assert _instrumented_magpy_functions() == []


def passes_a_gate(x: torch.Tensor, gate: Callable[[], None]) -> torch.Tensor:
    y = x * 2
    gate()
    return y + 1


def _same_shape_other_result(x: torch.Tensor, gate: Callable[[], None]) -> torch.Tensor:
    y = x * 2
    gate()
    return y - 1  # same bytecode offsets as passes_a_gate, another result


def test_a_reset_from_another_thread_lets_the_running_call_finish_as_eager() -> None:
    """Thread A is inside a compiled call (split mode) when the main thread resets and then
    compiles a function with the same bytecode layout: A's call still returns its own result
    (its sites never find the other function's records), and both compile again afterwards."""
    inside, release = threading.Event(), threading.Event()
    limit = sys.getrecursionlimit()

    def blocking() -> None:
        inside.set()
        release.wait(10)

    def passing() -> None:
        pass

    magpy.annotate(blocking, effect=True)
    magpy.annotate(passing, effect=True)
    compiled = magpy.compile(passes_a_gate, backend="eager")
    x = torch.randn(3)
    for _ in range(4):
        H.assert_same(compiled(x, passing), x * 2 + 1)
    assert _stats(compiled)[1] >= 2
    got: list[Any] = []
    worker = threading.Thread(target=lambda: got.append(compiled(x, blocking)))
    worker.start()
    assert inside.wait(10)
    magpy.reset()
    other = magpy.compile(_same_shape_other_result, backend="eager")
    for _ in range(4):
        H.assert_same(other(x, passing), x * 2 - 1)
    assert _stats(other)[1] >= 2
    release.set()
    worker.join(10)
    assert len(got) == 1
    H.assert_same(got[0], x * 2 + 1)
    for _ in range(3):
        H.assert_same(compiled(x, passing), x * 2 + 1)
        H.assert_same(other(x, passing), x * 2 - 1)
    assert _stats(compiled)[1] >= 2 and _stats(other)[1] >= 4
    assert sys.getrecursionlimit() == limit  # both threads' headroom is given back


# ---------------------------------------------------------------------- copies and pickle
class Breaks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        note("forward")
        return torch.relu(y)


def _modules() -> list[nn.Module]:
    return [nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)), Breaks()]


def _pickled(obj: Any) -> Any:
    return pickle.loads(pickle.dumps(obj))


@pytest.mark.parametrize("calls_before", [0, 3])
@pytest.mark.parametrize("how", [copy.deepcopy, _pickled], ids=["deepcopy", "pickle"])
@pytest.mark.parametrize("which", [0, 1], ids=["sequential", "with-break"])
def test_a_deep_copy_or_unpickled_compiled_module_is_compiled_with_a_cache_of_its_own(
    how: Callable[[Any], Any], calls_before: int, which: int
) -> None:
    """The copy wraps a copy of the module (its own parameters), starts with an empty cache,
    records and hits on its own, and leaves the original's cache and parameters alone."""
    torch.manual_seed(0)
    mod = _modules()[which]
    compiled = magpy.compile(mod, backend="eager")
    x = torch.randn(2, 4)
    for _ in range(calls_before):
        H.assert_same(compiled(x), mod(x))
    before = _stats(compiled)
    dup = how(compiled)
    assert isinstance(dup, magpy.CompiledModule) and dup is not compiled
    twin = dup._orig_mod
    assert twin is not mod and type(twin) is type(mod)
    assert _stats(dup) == (0, 0)
    with torch.no_grad():
        next(twin.parameters()).add_(1.0)  # the copy's parameters are its own
    for _ in range(4):
        H.assert_same(dup(x), twin(x))
        H.assert_same(compiled(x), mod(x))
    records, hits = _stats(dup)
    # (a module with a break records at its sites, which serve every instance: the copy's
    # calls may hit records the original made there, their guards read the copy's state)
    assert hits >= 2 and (records >= 1 or which == 1), (records, hits)
    assert _stats(compiled)[0] >= before[0]
    assert not torch.equal(dup(x), compiled(x))


def test_a_shallow_copy_compiles_the_same_module_again() -> None:
    """``copy.copy``: a new compiled module of the same module, with its own cache."""
    mod = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
    compiled = magpy.compile(mod, backend="eager")
    x = torch.randn(2, 3)
    compiled(x)
    dup = copy.copy(compiled)
    assert isinstance(dup, magpy.CompiledModule) and dup is not compiled
    assert dup._orig_mod is mod and _stats(dup) == (0, 0)
    for _ in range(3):
        H.assert_same(dup(x), mod(x))
    assert _stats(dup)[1] >= 2


def scale_and_shift(x: torch.Tensor) -> torch.Tensor:
    return x * 3 - 1


@magpy.compile(backend="eager")
def compiled_at_module_level(x: torch.Tensor) -> torch.Tensor:
    return x * 3 + 1


def test_a_compiled_function_pickles_by_reference_and_copies_as_a_function() -> None:
    """Decorated at module level: pickled by reference (unpickling gives the same object);
    compiled from a module-level function: unpickled as a compilation of that function; copies
    give the compiled function itself, as for a function."""
    x = torch.randn(3)
    for _ in range(2):
        H.assert_same(compiled_at_module_level(x), x * 3 + 1)
    assert _pickled(compiled_at_module_level) is compiled_at_module_level
    compiled = magpy.compile(scale_and_shift, backend="eager")
    for fresh in (True, False):
        if not fresh:
            for _ in range(2):
                compiled(x)
        back = _pickled(compiled)
        assert isinstance(back, magpy.CompiledFunction) and back is not compiled
        assert back._magpy_original is scale_and_shift and _stats(back) == (0, 0)
        for _ in range(3):
            H.assert_same(back(x), scale_and_shift(x))
        assert _stats(back)[1] >= 2
    assert copy.copy(compiled) is compiled and copy.deepcopy(compiled) is compiled

    def local(t: torch.Tensor) -> torch.Tensor:
        return t + 1

    with pytest.raises((pickle.PicklingError, AttributeError), match="local"):
        pickle.dumps(magpy.compile(local, backend="eager"))


# ---------------------------------------------------------------------- container protocols
def test_a_compiled_container_module_forwards_the_container_protocols() -> None:
    """``len``, ``[i]``, ``[a:b]``, ``iter``, ``in``, ``reversed``, item assignment and
    deletion reach the original; items are its submodules (not compiled); calls still hit."""
    seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    items = list(seq)
    compiled = magpy.compile(seq, backend="eager")
    assert len(compiled) == 3 and bool(compiled)
    assert compiled[0] is items[0] and compiled[-1] is items[2]
    assert list(compiled) == items and list(reversed(compiled)) == items[::-1]
    assert items[1] in compiled and nn.ReLU() not in compiled
    head = compiled[0:2]
    assert type(head) is nn.Sequential and list(head) == items[:2]
    x = torch.randn(2, 4)
    for _ in range(3):
        H.assert_same(compiled(x), seq(x))
    assert _stats(compiled)[1] >= 2
    compiled[2] = nn.Linear(4, 3)
    assert seq[2] is compiled[2]
    del compiled[1]
    assert len(seq) == 2 and len(compiled) == 2
    for _ in range(3):
        H.assert_same(compiled(x), seq(x))  # the change is seen (re-recorded)
    assert set(dir(seq)) <= set(dir(compiled)) and "MagPy(Sequential(" in repr(compiled)


def test_module_lists_and_dicts_forward_their_protocols_and_a_linear_has_none() -> None:
    """``ModuleList``/``ModuleDict`` behave as the original; a compiled ``Linear`` is not
    sized, iterable or subscriptable, as the ``Linear`` (a TypeError), and is true."""
    lst = nn.ModuleList([nn.Linear(2, 2), nn.Tanh()])
    cl = magpy.compile(lst, backend="eager")
    assert len(cl) == 2 and cl[1] is lst[1] and list(cl) == list(lst)
    cl += [nn.ReLU()]
    assert len(lst) == 3 and isinstance(cl, magpy.CompiledModule)
    dct = nn.ModuleDict({"a": nn.Linear(2, 2), "b": nn.ReLU()})
    cd = magpy.compile(dct, backend="eager")
    assert len(cd) == 2 and "a" in cd and "z" not in cd and cd["b"] is dct["b"]
    assert list(cd) == ["a", "b"] and list(cd.keys()) == ["a", "b"]
    lin = nn.Linear(2, 2)
    cli = magpy.compile(lin, backend="eager")
    assert bool(cli) and not isinstance(cli, collections.abc.Iterable | collections.abc.Sized)
    for op in (len, iter, lambda m: m[0], lambda m: 1 in m):
        with pytest.raises(TypeError):
            op(lin)
        with pytest.raises(TypeError):
            op(cli)
    assert "weight" in dir(cli)


# ---------------------------------------------------------------------- frames and recursion
def _magpy_frames() -> list[str]:
    """Names of the frames between the caller of ``note_frames``'s caller and this test's
    helper ``call_through``."""
    names = []
    f = sys._getframe(3)
    while f is not None and f.f_code.co_name != "call_through":
        names.append(f.f_code.co_name)
        f = f.f_back
    return names


FRAMES: list[list[str]] = []


def note_frames() -> None:
    FRAMES.append(_magpy_frames())


magpy.annotate(note_frames, effect=True)


def frames_whole(x: torch.Tensor) -> torch.Tensor:
    note_frames()
    return x + 1


def call_through(fn: Callable[..., Any], x: torch.Tensor) -> Any:
    return fn(x)


def test_one_magpy_frame_below_the_function_on_native_calls_and_two_when_monitored() -> None:
    """Between ``call_through`` and the function: ``run`` (and ``entry`` while monitored)."""
    FRAMES.clear()
    compiled = magpy.compile(frames_whole, backend="eager")
    for _ in range(4):
        H.assert_same(call_through(compiled, torch.ones(2)), torch.ones(2) + 1)
    assert FRAMES[0] == ["entry", "run"], FRAMES  # the first call is monitored
    assert all(f == ["run"] for f in FRAMES[1:]), FRAMES  # split mode: native
    assert magpy.stats(compiled).hits >= 4  # the segments before and after the break hit


def deep(n: int) -> int:
    return 0 if n == 0 else 1 + deep(n - 1)


def with_recursion(x: torch.Tensor, n: int) -> torch.Tensor:
    return x + deep(n)


def with_recursion_and_break(x: torch.Tensor, n: int) -> torch.Tensor:
    note("before")
    return x + deep(n)


def _deepest(call: Callable[[int], Any]) -> int:
    """The largest ``n`` for which ``call(n)`` does not overflow."""
    lo, hi = 1, sys.getrecursionlimit()
    while lo < hi:
        mid = (lo + hi + 1) // 2
        try:
            call(mid)
            lo = mid
        except RecursionError:
            hi = mid - 1
    return lo


def _once(call: Callable[[int], Any], k: int) -> Any:
    """``call(k)`` from the depth at which ``_deepest`` calls it."""
    return call(k)


def test_recursion_near_the_limit_works_compiled_wherever_it_works_eagerly() -> None:
    """At the deepest recursion eager manages: a monitored whole call and a monitored segment
    record (no fallback), a native call (eager mode) runs and one level deeper overflows as
    eager does, and the recursion limit is the program's after every call.

    ``dynamic=False`` keeps ``n`` a constant: as a dynamic int, ``1 + deep(n - 1)`` would be an
    expression ``n`` deep, which the monitor walks recursively (it then runs eagerly).
    """
    limit = sys.getrecursionlimit()
    x = torch.ones(2)
    n = _deepest(lambda k: with_recursion(x, k))
    assert n > limit - 100
    monitored = magpy.compile(with_recursion, backend="eager")
    H.assert_same(_once(lambda k: monitored(x, k), n), with_recursion(x, n))
    assert magpy.stats(monitored).records == 1 and magpy.stats(monitored).fallbacks == 0
    H.assert_same(_once(lambda k: monitored(x, k), n), with_recursion(x, n))
    assert magpy.stats(monitored).hits == 1 and sys.getrecursionlimit() == limit
    split = magpy.compile(with_recursion_and_break, backend="eager", dynamic=False)
    for _ in range(3):
        split(x, 3)
    for _ in range(2):  # the segment after the break is monitored at depth n, then hits
        H.assert_same(_once(lambda k: split(x, k), n), with_recursion_and_break(x, n))
        assert sys.getrecursionlimit() == limit
    assert magpy.stats(split).fallbacks == 0 and magpy.stats(split).hits >= 4
    eager_mode = magpy.compile(with_recursion, backend="eager", options={"max_records": 1})
    eager_mode(x, 1)
    with pytest.warns(magpy.MagPyWarning, match="max_records"):
        eager_mode(x, 2)  # a second record would be needed: eagerly from now on
    assert _deepest(lambda k: eager_mode(x, k)) == n  # exactly eager's depth, natively
    assert sys.getrecursionlimit() == limit


def sets_its_own_limit(x: torch.Tensor, limit: int) -> torch.Tensor:
    sys.setrecursionlimit(limit)
    return x * 2


def test_a_limit_the_program_sets_inside_a_compiled_call_is_kept_after_it() -> None:
    """``sys.setrecursionlimit`` inside: after the call the program's value is the limit, and
    at the deepest recursion eager manages the compiled call works."""
    limit = sys.getrecursionlimit()
    compiled = magpy.compile(sets_its_own_limit, backend="eager")
    x = torch.ones(2)
    try:
        for wanted in (limit + 500, limit + 500, limit):
            H.assert_same(compiled(x, wanted), x * 2)
            assert sys.getrecursionlimit() == wanted
        n = _deepest(lambda k: with_recursion(x, k))
        again = magpy.compile(with_recursion_and_break, backend="eager", dynamic=False)
        for _ in range(3):
            H.assert_same(_once(lambda k: again(x, k), n), with_recursion_and_break(x, n))
        assert magpy.stats(again).hits >= 2
    finally:
        sys.setrecursionlimit(limit)


# ---------------------------------------------------------------------- warnings and frames
def warns_the_caller(x: torch.Tensor) -> torch.Tensor:
    warnings.warn("about the caller", UserWarning, stacklevel=2)
    return x * 2


def warns_the_caller_after_a_break(x: torch.Tensor) -> torch.Tensor:
    note("before")
    warnings.warn("about the caller, split", UserWarning, stacklevel=2)
    return x * 2


class WarnsTheCaller(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        warnings.warn("about the module's caller", UserWarning, stacklevel=4)
        return x * 2


def _from_two_lines(fn: Callable[..., Any], x: torch.Tensor) -> list[Any]:
    """Three calls from one line, two from the next, under the default filter."""
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("default")
        outs = [fn(x) for _ in range(3)]
        outs += [fn(x) for _ in range(2)]
    return [outs, [(str(w.message), w.category, w.filename, w.lineno) for w in log]]


@pytest.mark.parametrize(
    "make",
    [lambda: warns_the_caller, lambda: warns_the_caller_after_a_break, WarnsTheCaller],
    ids=["whole-call", "split", "module"],
)
def test_a_warning_naming_the_caller_names_the_calling_line_once_per_line(
    make: Callable[[], Any],
) -> None:
    """``stacklevel`` reaching the compiled function's caller: the warning names the calling
    line (this file), every call, and the default filter shows it once per line, as eager."""
    fn = make()
    compiled = magpy.compile(fn, backend="eager")
    x = torch.randn(3)
    want_outs, want = _from_two_lines(fn, x)
    got_outs, got = _from_two_lines(compiled, x)
    H.assert_same(got_outs, want_outs)
    assert got == want and len(want) == 2, (got, want)
    assert {w[2] for w in got} == {__file__}
    got_outs, got = _from_two_lines(compiled, x)  # all hits or settled segments now
    assert got == want, (got, want)
    records, hits = _stats(compiled)
    assert records >= 1 and hits >= 4, (records, hits)
