"""No program can kill the process (issue 35, class 0).

A graph break directly inside a ``with`` block of a generator-based context manager
(``@contextlib.contextmanager``) used to end the process with a segmentation fault: the entry
site of ``_GeneratorContextManager.__exit__`` resumed before the ``next(self.gen)`` call inside
its ``try``, the ``bytecode`` package then lost the handler's depth (see
``packages/magpy-codegen/tests/unit/test_instrument.py``), and the ``StopIteration`` unwound onto
stale stack slots. Each program here runs in a child process: it compiles, hits, misses on a new
input shape, compares every result with eager, and must exit 0, also through interpreter exit
(where one variant used to crash).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_PRELUDE = """
import contextlib, torch, magpy

def run(f, inputs):
    cf = magpy.compile(f, backend="eager")
    for args in inputs:
        want = f(*args)
        got = cf(*args)
        assert torch.equal(got, want), (got, want)
    st = magpy.stats(cf)
    assert st.hits > 0, st
    print("survived", st.records, st.hits)
"""

_PROGRAMS = {
    "fork_rng_with_a_seed_inside": """
def f(x, s):
    with torch.random.fork_rng():
        torch.manual_seed(s)
        y = torch.rand(3)
    return x * 2 + y

run(f, [(torch.ones(4, 3), 1)] * 5 + [(torch.ones(5, 3), 2), (torch.ones(5, 3), 1)])
""",
    "fork_rng_one_shape_then_exit": """
def f(x, s):
    with torch.random.fork_rng():
        torch.manual_seed(s)
        y = torch.rand(3)
    return x + y

run(f, [(torch.ones(2, 3), 1)] * 6)
""",
    "own_generator_manager_with_a_print_inside": """
@contextlib.contextmanager
def scaled(log):
    log.append("in")
    yield 2.0
    log.append("out")

def f(x, log):
    with scaled(log) as k:
        print("inside")
        y = x * k
    return y + 1

log = []
run(f, [(torch.ones(3), log)] * 4 + [(torch.ones(4), log)] * 2)
assert log == ["in", "out"] * 12, log
""",
    "own_generator_manager_that_swallows_the_body_error": """
@contextlib.contextmanager
def swallow():
    try:
        yield
    except ValueError:
        pass

def f(x, fail):
    y = x + 1
    with swallow():
        print("body")
        if fail:
            raise ValueError("dropped by the manager")
        y = y * 3
    return y

run(f, [(torch.ones(3), False), (torch.ones(3), True)] * 3 + [(torch.ones(4), True)])
""",
    "nested_generator_managers_returning_inside": """
@contextlib.contextmanager
def outer():
    yield

@contextlib.contextmanager
def inner():
    yield

def f(x):
    with outer():
        with inner():
            print("inner body")
            return x.sin() + 1

run(f, [(torch.ones(3),)] * 4 + [(torch.ones(2, 2),)] * 3)
""",
}


@pytest.mark.parametrize("name", sorted(_PROGRAMS))
def test_a_break_inside_a_generator_context_manager_never_kills_the_process(name: str) -> None:
    source = textwrap.dedent(_PRELUDE) + textwrap.dedent(_PROGRAMS[name])
    proc = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-W", "ignore", "-c", source],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "survived" in proc.stdout, proc.stdout + proc.stderr
