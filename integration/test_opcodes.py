"""Every instruction of the running CPython (3.11-3.13), each in a program run through MagPy.

(PYTEST_DONT_REWRITE: the programs' own ``assert`` must stay LOAD_ASSERTION_ERROR.)

``PROGRAMS`` are small PyTorch programs written so that, between them, their code objects
(nested functions, comprehensions, class bodies and generators included) hold every opcode in
``dis.opmap``. ``test_every_opcode_is_exercised`` checks that coverage from the bytecode itself,
so a program the compiler turns into other instructions fails it. Each program then runs
compiled against eager on fresh inputs: the ``ONE_GRAPH`` ones must be one record with cache
hits, no break and no fallback; the ``BREAKS`` ones (coroutines, ``except*``) must report a
break with the reason given and still give eager's results.

Instructions that function code cannot hold are listed in ``NOT_IN_FUNCTIONS`` with the reason;
the test checks those reasons (``import *`` is a SyntaxError inside a function, ``PRINT_EXPR``
only comes from the interactive mode). Where the versions differ, the interpreter does:

- 3.12 and 3.13 list in ``dis.opmap`` the compiler's pseudo-instructions (numbered from 256:
  ``SETUP_FINALLY``, ``JUMP``, ``LOAD_METHOD``..., replaced before a code object exists) and
  the ``INSTRUMENTED_*`` opcodes (from ``opcode.MIN_INSTRUMENTED_OPCODE``: ``sys.monitoring``
  writes them over the running code, and ``co_code`` gives the original back); neither can be
  held by a code object, so neither counts. Their other opcodes that no compiled source holds
  are in ``NOT_IN_FUNCTIONS`` (names a version lacks are not in its ``dis.opmap``).
- On 3.12+ ``import *`` and ``PRINT_EXPR`` are ``CALL_INTRINSIC_1`` forms; the test reads them
  in MagPy's neutral vocabulary (``INTERP.rename``), where they keep 3.11's names.
- ``GENERIC_SOURCE`` (PEP 695's ``def m[T]``: ``LOAD_FROM_DICT_OR_GLOBALS``, 3.12+) is a
  program only where the syntax exists; it breaks at its type-parameter intrinsics.
"""

from __future__ import annotations

import dis
import math
import opcode
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import magpy
from magpy_monitor import INTERP

G_COUNTER = 0
G_SCRATCH = 0


# ---------------------------------------------------------------------- one-graph programs
def arith(x: torch.Tensor, n: int, d: dict[str, int]) -> Any:
    """Unary and binary operators, comparisons (chained: COPY/SWAP), ``and``/``or`` values,
    ``is``/``in``, conditional jumps forward."""
    a = -x + (+x) * (~n)
    flag = not n
    is_set = n is not None
    chained = 0 < n < 10
    both = n and 5
    either = n or 7
    has = "k" in d
    if n > 2:  # noqa: SIM108  (the jumps are the point)
        a = a * 2
    else:
        a = a / 2
    if x is None:
        a = a + 100
    if d is not None:
        a = a + 1
    if not flag:
        a = a - 1
    if has:
        a = a + d["k"]
    return a, flag, is_set, chained, both, either


def containers(x: torch.Tensor, xs: list[torch.Tensor], kw: dict[str, Any]) -> Any:
    """Building and unpacking: tuples, lists, sets, dicts, slices (BINARY_SLICE, STORE_SLICE
    and a step's BUILD_SLICE on 3.12+), star-unpacking, merges."""
    t = (x, x + 1)
    lst = [x, *xs]
    tup = (*xs, x)
    s = {1, len(xs)}
    s2 = {*s, 3}
    m = {"a": x, "b": 2}
    m2 = {str(len(xs)): x}
    merged = {**kw, "z": 0}
    first, *rest = lst
    p, q = t
    part = xs[1:3]
    evens = xs[::2]
    del merged["z"]
    lst[0] = first * 2
    lst[1:2] = [first]
    del lst[1]
    return lst, tup, sorted(s2), m, m2, merged, rest, p + q, part, evens


def _sink(*args: Any, **kwargs: Any) -> Any:
    return sum(a.sum() for a in args) + sum(v for v in kwargs.values())


def calls(x: torch.Tensor, args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
    """Calls of every shape: keywords (KW_NAMES), ``*args``/``**kwargs`` (CALL_FUNCTION_EX,
    DICT_MERGE), methods (LOAD_METHOD), builtins (PUSH_NULL)."""
    a = _sink(x, *args, scale=1, **kw)
    b = _sink(*args, **kw, other=2)
    c = x.add(1, alpha=2)
    d = torch.cat([x, x]).sum(dim=0)
    return a + b + c.sum() + d


def comprehensions(x: torch.Tensor, n: int) -> Any:
    """List, set and dict comprehensions, a generator expression, lambdas, closures."""
    k = n + 1
    squares = [x * i for i in range(n)]
    keys = {i % 2 for i in range(n)}
    table = {i: x + i for i in range(n)}
    total = sum(t.sum() for t in squares)
    scale = (lambda v: v * k)(x)

    def bump(v: torch.Tensor) -> torch.Tensor:
        nonlocal k
        k = k + 1
        return v + k

    return squares, keys, table, total, scale, bump(x), k


def loops(x: torch.Tensor, n: int) -> torch.Tensor:
    """``for``/``while`` loops with their conditions at the bottom (backward jumps)."""
    i = 0
    while i < n:
        x = x + 1
        i += 1
    done = False
    while not done:
        x = x * 2
        done = True
    node: Any = (1, None)
    while node is not None:
        x = x - node[0]
        node = node[1]
    empty: Any = None
    while empty is None:
        x = x + 0.5
        empty = 1
    for j in range(n):
        if j == 1:
            continue
        x = x + j
    return x


def strings(x: torch.Tensor, name: str, v: float) -> Any:
    """f-strings (FORMAT_VALUE with conversions and specs, BUILD_STRING)."""
    label = f"{name}-{v:.2f}-{name!r}-{len(name)}"
    return x * len(label), label


def _risky(v: torch.Tensor, fail: bool) -> torch.Tensor:
    if fail:
        raise ValueError("bad")
    return v + 1


def exceptions(x: torch.Tensor, fail: bool) -> torch.Tensor:
    """``try``/``except``/``finally`` handled inside the program, ``raise``, ``assert``."""
    assert x.dim() == 1, "1-D input"
    try:
        y = _risky(x, fail)
    except ValueError:
        y = x - 1
    finally:
        x = x * 1
    try:
        try:
            raise KeyError("inner")
        finally:
            y = y * 2
    except KeyError as err:
        y = y + len(err.args)
    return y + x


class Suppress:
    """A Python context manager that swallows ValueError (WITH_EXCEPT_START calls __exit__)."""

    def __enter__(self) -> Suppress:
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> bool:
        return kind is ValueError


def withs(x: torch.Tensor, fail: bool) -> torch.Tensor:
    with torch.no_grad():
        y = x * 2
    with Suppress():
        y = y + 1
        if fail:
            raise ValueError("swallowed")
        y = y + 1
    return y


def _gen(x: torch.Tensor, n: int) -> Iterator[torch.Tensor]:
    for i in range(n):
        yield x + i
    return


def _outer_gen(x: torch.Tensor, n: int) -> Iterator[torch.Tensor]:
    yield from _gen(x, n)
    yield x * 10


def generators(x: torch.Tensor, n: int) -> torch.Tensor:
    """Generators (RETURN_GENERATOR, YIELD_VALUE) and ``yield from`` (GET_YIELD_FROM_ITER,
    SEND, JUMP_BACKWARD_NO_INTERRUPT)."""
    return sum(_outer_gen(x, n), torch.zeros(()))


class _Box:
    a: int
    b: int


def scopes(x: torch.Tensor) -> torch.Tensor:
    """``global``, ``del`` of locals, cells and attributes, imports inside the function."""
    global G_COUNTER
    import math as m
    from math import sqrt

    G_COUNTER = G_COUNTER + 1
    tmp = x + 1
    del tmp
    cell = x * 2

    def read() -> torch.Tensor:
        return cell  # noqa: F821  (deleted after the call: DELETE_DEREF)

    y = read()
    del cell
    box = _Box()
    box.a, box.b = 1, 2
    del box.a
    return y * m.pi + sqrt(4) + box.b


def drop_global(x: torch.Tensor) -> torch.Tensor:
    """``del`` of a global (DELETE_GLOBAL); the test puts it back before each call."""
    global G_SCRATCH
    del G_SCRATCH
    return x + 1


class _Doubler:
    def apply(self, t: torch.Tensor) -> torch.Tensor:
        return t * 2


def class_body(x: torch.Tensor, k: float) -> torch.Tensor:
    """A class statement: LOAD_BUILD_CLASS, the body's STORE_NAME/LOAD_NAME/DELETE_NAME,
    SETUP_ANNOTATIONS, LOAD_CLASSDEREF, and ``super()`` through the ``__class__`` cell."""

    class Scaled(_Doubler):
        gain: float = k
        tmp = math.e
        del tmp

        def apply(self, t: torch.Tensor) -> torch.Tensor:
            return super().apply(t) * self.gain

    return Scaled().apply(x)


def matching(x: torch.Tensor, subject: Any) -> torch.Tensor:
    """``match``: sequence, mapping (with ``**rest``), class and literal patterns."""
    match subject:
        case {"scale": s, **rest}:
            return x * s + len(rest)
        case [a, b, *others]:
            return x + a + b + len(others)
        case complex(real=r):
            return x * r
        case _:
            return x


def _many_locals_source() -> str:
    # 300 locals: STORE_FAST/LOAD_FAST need EXTENDED_ARG past slot 255
    body = "".join(f"    a{i} = {i}.5\n" for i in range(300))
    return f"def wide(x):\n{body}    return x * a299 + a0\n"


def _wide() -> Callable[..., Any]:
    namespace: dict[str, Any] = {}
    exec(compile(_many_locals_source(), "<opcode-table>", "exec"), namespace)
    fn: Callable[..., Any] = namespace["wide"]
    return fn


wide = _wide()


# ---------------------------------------------------------------------- programs that break
async def _coroutine(x: torch.Tensor) -> torch.Tensor:
    async with _AsyncCtx():
        async for v in _AsyncRange(2):
            x = x + v
    return x


class _AsyncCtx:
    async def __aenter__(self) -> _AsyncCtx:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None


class _AsyncRange:
    def __init__(self, n: int) -> None:
        self.i, self.n = 0, n

    def __aiter__(self) -> _AsyncRange:
        return self

    async def __anext__(self) -> int:
        if self.i == self.n:
            raise StopAsyncIteration
        self.i += 1
        return self.i


async def _async_gen(x: torch.Tensor) -> Any:
    yield x * 2
    await _nothing()


async def _nothing() -> None:
    return None


def coroutines(x: torch.Tensor) -> torch.Tensor:
    """A coroutine driven by hand (``send(None)``), an async generator's ``__anext__``."""
    coro = _coroutine(x)
    try:
        coro.send(None)
    except StopIteration as stop:
        result: torch.Tensor = stop.value
    agen = _async_gen(x).__anext__()
    try:
        agen.send(None)
    except StopIteration as stop:
        result = result + stop.value
    return result


def exception_groups(x: torch.Tensor) -> torch.Tensor:
    """``except*`` (CHECK_EG_MATCH, PREP_RERAISE_STAR)."""
    y = x * 2
    try:
        raise ExceptionGroup("group", [ValueError(1), KeyError(2)])
    except* ValueError:
        y = y + 1
    except* KeyError:
        y = y + 2
    return y


# a generic method in a class: its annotation scope reads the global ``float`` through the
# class namespace (LOAD_FROM_DICT_OR_GLOBALS); PEP 695 syntax, 3.12+
GENERIC_SOURCE = """
def generic_method(x):
    class Holder:
        def scale[T](self, t: T, k: float) -> T:
            return t * k

    return Holder().scale(x, 2.0)
"""


def _generic_method() -> Callable[..., Any] | None:
    """``generic_method`` where the interpreter has PEP 695's syntax, else None."""
    try:
        # (dont_inherit: this module's `from __future__ import annotations` would make the
        # annotations strings, and the annotation scope would read no name)
        code = compile(GENERIC_SOURCE, "<opcode-table-generic>", "exec", dont_inherit=True)
    except SyntaxError:
        return None
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    fn: Callable[..., Any] = namespace["generic_method"]
    return fn


generic_method = _generic_method()


# ---------------------------------------------------------------------- the table
def _t(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


# name -> (program, inputs for call i)
ONE_GRAPH: dict[str, tuple[Callable[..., Any], Callable[[int], tuple[Any, ...]]]] = {
    "arith": (arith, lambda i: (_t(3), 4, {"k": 2})),
    "containers": (containers, lambda i: (_t(2), [_t(2), _t(2), _t(2)], {"w": 1})),
    "calls": (calls, lambda i: (_t(2), (_t(2),), {"bias": 3})),
    "comprehensions": (comprehensions, lambda i: (_t(2), 3)),
    "loops": (loops, lambda i: (_t(2), 3)),
    "strings": (strings, lambda i: (_t(2), "ab", 1.25)),
    "exceptions": (exceptions, lambda i: (_t(3), True)),
    "withs": (withs, lambda i: (_t(3), True)),
    "generators": (generators, lambda i: (_t(2), 3)),
    "scopes": (scopes, lambda i: (_t(2),)),
    "class_body": (class_body, lambda i: (_t(2), 1.5)),
    "matching": (matching, lambda i: (_t(2), {"scale": 2, "other": 1})),
    "wide": (wide, lambda i: (_t(2),)),
}

# name -> (program, inputs, a part of the break reason)
BREAKS: dict[str, tuple[Callable[..., Any], Callable[[int], tuple[Any, ...]], str]] = {
    "coroutines": (coroutines, lambda i: (_t(2),), "coroutine"),
    "exception_groups": (exception_groups, lambda i: (_t(2),), "CHECK_EG_MATCH"),
}
if generic_method is not None:  # (3.12+: the type parameter is made by an intrinsic)
    BREAKS["generic_method"] = (generic_method, lambda i: (_t(2),), "INTRINSIC_TYPEVAR")

# opcodes that function bodies compiled from source never hold (a name the running version
# lacks is simply not in its dis.opmap)
NOT_IN_FUNCTIONS = {
    "IMPORT_STAR": "`from m import *` is a SyntaxError inside a function",
    "PRINT_EXPR": "only the interactive mode's expression statements print",
    "INTERPRETER_EXIT": "3.12+: only the code of the interpreter's own entry frame holds it",
    "RESERVED": "3.12+: a placeholder number that no instruction uses",
    "ENTER_EXECUTOR": "3.13: the optimizer writes it over a running JUMP_BACKWARD; not in co_code",
    "EXIT_INIT_CHECK": "3.13: only the shim frame of a specialised `C()` call (its __init__)",
}
# the first opcode number that is not a code object's (pseudo-instructions, 3.12+), and the
# first that sys.monitoring writes over running code (INSTRUMENTED_*, 3.12+)
_PSEUDO_FROM = 256
_INSTRUMENTED_FROM: int = getattr(opcode, "MIN_INSTRUMENTED_OPCODE", _PSEUDO_FROM)


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _program_codes(fn: Callable[..., Any]) -> Iterator[types.CodeType]:
    """The code of ``fn`` and of the module-level helpers it names (``_gen``, ``_risky``...)."""
    seen: set[str] = set()
    todo = [fn]
    while todo:
        f = todo.pop()
        if f.__name__ in seen:
            continue
        seen.add(f.__name__)
        for code in _codes(f.__code__):
            yield code
            for name in code.co_names:
                helper = globals().get(name)
                if isinstance(helper, types.FunctionType) and name.startswith("_"):
                    todo.append(helper)
                elif isinstance(helper, type) and helper.__module__ == __name__:
                    todo += [v for v in vars(helper).values() if isinstance(v, types.FunctionType)]


def _opcodes(fn: Callable[..., Any]) -> set[str]:
    """The opcodes in the programs' code units, inline caches (CACHE) and EXTENDED_ARG included
    (``co_code`` is the code without specialisation or instrumentation on every version; 3.13's
    ``dis`` no longer lists the caches)."""
    return {dis.opname[op] for code in _program_codes(fn) for op in code.co_code[::2]}


def _code_opcodes() -> set[str]:
    """The names in ``dis.opmap`` that a code object can hold."""
    return {name for name, op in dis.opmap.items() if op < min(_PSEUDO_FROM, _INSTRUMENTED_FROM)}


def test_every_opcode_is_exercised() -> None:
    covered: set[str] = set()
    for fn, *_ in [*ONE_GRAPH.values(), *BREAKS.values(), (drop_global,)]:
        covered |= _opcodes(fn)
    missing = _code_opcodes() - covered - set(NOT_IN_FUNCTIONS)
    assert not missing, f"no program holds {sorted(missing)}"
    wrong = covered & set(NOT_IN_FUNCTIONS)
    assert not wrong, f"programs hold {sorted(wrong)}, which NOT_IN_FUNCTIONS says they cannot"


def test_what_functions_cannot_hold() -> None:
    with pytest.raises(SyntaxError):
        compile("def f():\n    from math import *\n", "<t>", "exec")
    interactive = compile("1 + 1\n", "<t>", "single")
    assert "PRINT_EXPR" in _opcodes_of(interactive)
    function = compile("def f():\n    1 + 1\n", "<t>", "exec")
    assert all("PRINT_EXPR" not in _opcodes_of(c) for c in _codes(function))


def _opcodes_of(code: types.CodeType) -> set[str]:
    """The instructions of ``code`` in MagPy's neutral vocabulary (3.12+'s intrinsic
    ``CALL_INTRINSIC_1 INTRINSIC_PRINT`` is ``PRINT_EXPR``, as on 3.11)."""
    return {(INTERP.rename(i) or (i.opname,))[0] for i in dis.get_instructions(code)}


@pytest.mark.parametrize("name", sorted(ONE_GRAPH))
def test_one_graph(name: str, check: Any) -> None:
    fn, inputs = ONE_GRAPH[name]
    check(fn, lambda i: (inputs(i), {}), calls=3)
    ex = magpy.explain(fn)(*inputs(0))
    assert (ex.graph_count, [b.reason for b in ex.break_reasons]) == (1, [])


def test_delete_global() -> None:
    """``del`` of a global: replayed by the mock; a call without the global misses the guard
    and raises the program's own NameError."""
    global G_SCRATCH
    compiled = magpy.compile(drop_global, backend="eager")
    for i in range(3):
        G_SCRATCH = i
        x = _t(2)
        assert torch.equal(compiled(x), x + 1)
        assert "G_SCRATCH" not in globals()
    with pytest.raises(NameError, match="G_SCRATCH"):
        compiled(_t(2))
    G_SCRATCH = 0
    stats = magpy.stats(compiled)
    assert (stats.records, stats.hits, stats.fallbacks) == (1, 2, 0)


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_programs_that_break(name: str) -> None:
    fn, inputs, reason = BREAKS[name]
    compiled = magpy.compile(fn, backend="eager")
    for i in range(4):
        args = inputs(i)
        assert torch.equal(compiled(*args), fn(*args))
        assert sys.exc_info() == (None, None, None)  # no handler left entered
    ex = magpy.explain(fn)(*inputs(0))
    assert any(reason in b.reason for b in ex.break_reasons), ex.break_reasons


def break_in_handler(x: torch.Tensor, fail: bool) -> torch.Tensor:
    try:
        if fail:
            raise ValueError("v")
        y = x
    except ValueError:
        print("handled")  # (a graph break inside the handler)
        y = x
    return y + 1


def test_a_break_inside_an_exception_handler_leaves_no_exception_behind() -> None:
    """Regression: a segment resumed inside an ``except`` block ran to the return in its
    record, skipping POP_EXCEPT, so ``sys.exc_info()`` still held the exception after the
    call (and became the ``__context__`` of the caller's next exception)."""
    compiled = magpy.compile(break_in_handler, backend="eager")
    for i in range(4):
        x = _t(3)
        assert torch.equal(compiled(x, True), x + 1)
        assert sys.exc_info() == (None, None, None), i
    assert magpy.stats(compiled).breaks >= 1


class _Pair:
    __match_args__ = ("first", "second")

    def __init__(self, first: float, second: float) -> None:
        self.first, self.second = first, second


def match_positional(x: torch.Tensor, pair: Any) -> torch.Tensor:
    match pair:
        case _Pair(a, b):
            return x * a + b
    return x


def test_a_class_patterns_match_args_are_guarded() -> None:
    """Regression: ``__match_args__`` was read without a guard on its value, so reordering
    it gave the recorded order's result."""
    compiled = magpy.compile(match_positional, backend="eager")
    x = _t(3)
    assert torch.equal(compiled(x, _Pair(2.0, 1.0)), x * 2 + 1)
    _Pair.__match_args__ = ("second", "first")
    try:
        assert torch.equal(compiled(x, _Pair(2.0, 1.0)), x * 1 + 2)
    finally:
        _Pair.__match_args__ = ("first", "second")
    assert magpy.stats(compiled).records == 2
