"""torch's ``associative_scan`` and the torch Python around it: pytrees, locks, ``map``.

Code written for ``torch.compile`` (Hugging Face's Mamba while ``is_compiling()`` is True) calls
``torch._higher_order_ops.associative_scan.associative_scan(combine_fn, xs, dim)``. It is one
graph node calling the same function with the same ``combine_fn`` (``libs/torch/hops.py``):
on CPU its ``generic`` mode runs ``combine_fn`` under ``torch.vmap``, which no graph of plain
operations reproduces. A ``combine_fn`` that closes over values (torch forbids lifted
arguments) is a break.

The rest is what following torch's Python meets on the way: ``torch.utils._pytree`` (a
``TreeSpec`` holds the class passed to it; ``BUILTIN_TYPES`` is a constant set of classes;
``tree_map`` over several trees is ``map(fn, a, b)``; ``tree_map_`` drains a ``map`` into
``deque(..., maxlen=0)``), and a ``threading.Lock`` made and used
in the run (a local object: its state is the shadow's, nothing is replayed).
"""

from __future__ import annotations

import collections
import dataclasses
import operator
import threading
from typing import Any

import _integration_helpers as H
import pytest
import torch
import torch.utils._pytree as pytree
from torch._higher_order_ops.associative_scan import associative_scan

import magpy


# ---------------------------------------------------------------------- associative_scan
def selective_scan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Mamba's recurrence h_t = a_t * h_(t-1) + b_t as a scan over dim 1, then a matmul."""

    def combine(left: Any, right: Any) -> Any:
        a_left, b_left = left
        a_right, b_right = right
        return a_left * a_right, a_right * b_left + b_right

    _, states = associative_scan(combine, (a.exp(), b), dim=1, combine_mode="generic")
    return states.sum(-1) @ torch.ones(states.shape[2], 2)


def _scan_inputs(i: int) -> H.Inputs:
    g = torch.Generator().manual_seed(i)
    return (-torch.rand(2, 7, 3, 4, generator=g), torch.randn(2, 7, 3, 4, generator=g)), {}


def test_associative_scan_is_one_node(check: Any) -> None:
    """The scan made in the function is one node: 1 record, the rest hits, equal to eager
    (which is the sequential recurrence). On a hit the eager backend's node calls the
    program's ``combine``, as torch's eager ``associative_scan`` does (Inductor traces it
    into the kernel), so the "no user code on a hit" check is off."""
    check(selective_scan, _scan_inputs, calls=4, check_hits_run_no_user_code=False)
    ex = magpy.explain(selective_scan)(*_scan_inputs(9)[0])
    assert (ex.graph_count, ex.graph_break_count) == (1, 0)
    assert "associative_scan" in [n.target.__name__ for n in _call_nodes(ex.graphs[0])]
    a, b = _scan_inputs(5)[0]
    h, want = torch.zeros(2, 3, 4), []
    for t in range(7):
        h = a[:, t].exp() * h + b[:, t]
        want.append(h)
    expected = torch.stack(want, 1).sum(-1) @ torch.ones(3, 2)
    torch.testing.assert_close(magpy.compile(selective_scan)(a, b), expected)


def _call_nodes(gm: Any) -> list[Any]:
    return [n for n in gm.graph.nodes if n.op == "call_function"]


def pair_max(left: list[torch.Tensor], right: list[torch.Tensor]) -> list[torch.Tensor]:
    return [torch.maximum(left[0], right[0]), left[1] + right[1]]


def cumulative(x: torch.Tensor, dim: int, reverse: bool) -> Any:
    sums = associative_scan(torch.add, x, dim, reverse=reverse, combine_mode="generic")
    both = associative_scan(pair_max, [x, x * 2], dim, reverse=reverse, combine_mode="generic")
    return sums, both


def test_scan_arguments_are_guarded(check: Any) -> None:
    """``dim`` and ``reverse`` are guarded by value: two settings, two records. A native
    combine_fn is kept by identity, a Python one from outside by identity and code; a list
    of leaves comes back as a list."""

    def inputs(i: int) -> H.Inputs:
        x = torch.randn(3, 5, generator=torch.Generator().manual_seed(i))
        return (x, i % 2, i % 2 == 0), {}

    # (pair_max runs on a hit: see test_associative_scan_is_one_node)
    compiled = check(
        cumulative, inputs, calls=4, expect_records=2, check_hits_run_no_user_code=False
    )
    sums, both = compiled(torch.ones(3, 5), 1, False)
    assert torch.equal(sums[0], torch.arange(1.0, 6.0)) and type(both) is list


def lifted(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    def combine(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return u + v * scale  # a lifted tensor: torch's contract forbids it

    return associative_scan(combine, x, 0, combine_mode="generic")


def test_scan_with_a_lifted_tensor_is_a_break() -> None:
    x, scale = torch.randn(6, 2), torch.tensor(2.0)
    ex = magpy.explain(lifted)(x, scale)
    assert "combine_fn with free variables" in H.break_text(ex)
    compiled = magpy.compile(lifted, backend="eager")
    for _ in range(3):
        torch.testing.assert_close(compiled(x, scale), lifted(x, scale))


@pytest.mark.inductor
@pytest.mark.slow
def test_associative_scan_through_inductor(check: Any) -> None:
    """Inductor traces through the node (make_fx follows the vmap)."""
    check(selective_scan, _scan_inputs, calls=3, backend="inductor")


# ---------------------------------------------------------------------- pytrees, map
def tree_program(x: torch.Tensor, ys: list[torch.Tensor]) -> Any:
    leaves, spec = pytree.tree_flatten((x, {"ys": ys}))
    doubled = pytree.tree_unflatten([t * 2 for t in leaves], spec)
    return pytree.tree_map(lambda a, b: a - b, doubled, (x, {"ys": ys}))


def test_pytree_flatten_unflatten_and_map_over_two_trees(check: Any) -> None:
    """TreeSpec.type is the class passed in (no break), the node-type check reads the constant
    BUILTIN_TYPES, and tree_map over two trees is map(f, a, b)."""

    def inputs(i: int) -> H.Inputs:
        g = torch.Generator().manual_seed(i)
        return (torch.randn(3, generator=g), [torch.randn(2, generator=g) for _ in range(2)]), {}

    check(tree_program, inputs, calls=3)
    assert H.graphs(tree_program, *inputs(0)[0]) == (1, [])


def effects_only(x: torch.Tensor, ys: list[torch.Tensor]) -> Any:
    seen: list[torch.Tensor] = []
    pytree.tree_map_(lambda t: seen.append(t * 2), (x, ys))  # deque(map(...), maxlen=0)
    last = collections.deque((t + 1 for t in ys), maxlen=1)
    return seen, list(last)


def test_deque_drains_a_map_or_a_generator(check: Any) -> None:
    check(effects_only, lambda i: ((torch.randn(2), [torch.randn(2) for _ in range(3)]), {}))


@dataclasses.dataclass
class Tagged:
    kind: type
    n: int


def tagged(x: torch.Tensor) -> torch.Tensor:
    t = Tagged(type(x), 2)
    return x + t.n if t.kind is torch.Tensor else x


def test_dataclass_field_holding_the_class_passed_in(check: Any) -> None:
    check(tagged, lambda i: ((torch.randn(3),), {}), calls=3)


def several(xs: list[torch.Tensor], ys: list[torch.Tensor], n: int) -> Any:
    products = list(map(lambda a, b, k: a * b * k, xs, ys, [n, n + 1]))  # shortest: 2 rows
    sums = tuple(map(operator.add, xs, ys))
    first, second = map(torch.sub, xs, ys)
    return products, sums, first + second


def test_map_over_several_iterables(check: Any) -> None:
    def inputs(i: int) -> H.Inputs:
        g = torch.Generator().manual_seed(i)
        xs = [torch.randn(2, generator=g) for _ in range(2)]
        return (xs, [torch.randn(2, generator=g) for _ in range(3)], 3), {}

    check(several, inputs, calls=3)


def uneven_iterators(xs: list[torch.Tensor]) -> Any:
    it = iter(xs)
    pairs = list(map(operator.mul, xs[:1], it))  # leaves `it` one item further on
    return pairs, list(it)


def test_map_over_iterators_of_different_lengths_is_a_break() -> None:
    xs = [torch.randn(2) for _ in range(3)]
    assert "different lengths" in H.break_text(magpy.explain(uneven_iterators)(xs))
    compiled = magpy.compile(uneven_iterators, backend="eager")
    for _ in range(3):
        H.assert_same(compiled(xs), uneven_iterators(xs), "out")


# ---------------------------------------------------------------------- locks
def locked_step(x: torch.Tensor) -> torch.Tensor:
    lock, rlock = threading.Lock(), threading.RLock()
    with lock:
        y = x + 1
        held = lock.locked()
    with rlock, rlock:
        y = y * 2
    again = lock.acquire(blocking=False)
    busy = not lock.acquire(False)
    lock.release()
    return y if held and again and busy and not lock.locked() else -y


def test_a_lock_made_in_the_run_is_local(check: Any) -> None:
    check(locked_step, lambda i: ((torch.randn(3),), {}), calls=3)


SHARED = threading.Lock()


def shared_lock(x: torch.Tensor) -> torch.Tensor:
    with SHARED:
        return x + 1


def escaping_lock(x: torch.Tensor) -> Any:
    return x + 1, threading.Lock()


def test_a_lock_from_outside_or_leaving_the_run_is_a_break() -> None:
    x = torch.randn(3)
    assert H.break_text(magpy.explain(shared_lock)(x)).startswith("`with` on a lock")
    compiled = magpy.compile(escaping_lock, backend="eager")
    with H.runs_eagerly():
        out = [compiled(x) for _ in range(2)]
    assert out[0][1] is not out[1][1] and not out[0][1].locked()
    assert H.counters(compiled)[0] == 0
