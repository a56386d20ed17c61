"""Which in-place updated inputs a failed graph run must put back (``core.undo``)."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F

from magpy_monitor.core.undo import UPDATE_RULES, may_raise, undo_inputs


def _update(g: fx.Graph, method: str, target: fx.Node, *args: object, key: str) -> fx.Node:
    node = g.call_method(method, (target, *args))
    node.meta["updates"] = {key}
    return node


def _step(counter_first: bool) -> fx.Graph:
    """counter.add_(1) (independent), e = embedding(idx, w) (may raise), then the momentum
    buffer: buf.mul_(0.9) (independent) and buf.add_(loss) (after the raise)."""
    g = fx.Graph()
    idx, w, counter, buf = (g.placeholder(n) for n in ("idx", "w", "counter", "buf"))
    if counter_first:
        _update(g, "add_", counter, 1, key="counter")
    scaled = _update(g, "mul_", buf, 0.9, key="buf")
    e = g.call_function(F.embedding, (idx, w))
    loss = g.call_method("sum", (e,))
    if not counter_first:
        _update(g, "add_", counter, 1, key="counter")
    _update(g, "add_", scaled, loss, key="buf")
    g.output((loss,))
    return g


KEYS = {0: "idx", 1: "w", 2: "counter", 3: "buf"}


@pytest.mark.parametrize(
    ("counter_first", "rule", "expected"),
    [
        (True, "order", (2, 3)),  # both written before the embedding runs
        (False, "order", (3,)),  # the counter's add_ comes after it: a raise stops it
        (False, "final", (2,)),  # buf's final value needs the loss; the counter's does not
        (False, "flow", (2, 3)),  # any order: buf.mul_ and counter.add_ may come first
    ],
)
def test_the_inputs_to_put_back(counter_first: bool, rule: str, expected: tuple[int, ...]) -> None:
    g = _step(counter_first)
    assert undo_inputs(g, (2, 3), KEYS, rule) == expected


def test_nothing_to_put_back_without_an_operation_that_may_raise() -> None:
    g = fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    y = g.call_function(torch.relu, (x,))
    _update(g, "add_", w, y, key="w")
    g.output((y,))
    for rule in UPDATE_RULES:
        assert undo_inputs(g, (1,), {0: "x", 1: "w"}, rule) == ()


def test_an_update_that_may_raise_itself_is_put_back() -> None:
    g = fx.Graph()
    x, idx = g.placeholder("x"), g.placeholder("idx")
    node = g.call_method("index_add_", (x, 0, idx, x))
    node.meta["updates"] = {"x"}
    g.output((x,))
    for rule in UPDATE_RULES:
        assert undo_inputs(g, (0,), {0: "x", 1: "idx"}, rule) == (0,)


def test_an_input_no_node_says_it_writes_is_put_back() -> None:
    g = fx.Graph()
    x = g.placeholder("x")
    g.output((g.call_function(torch.relu, (x,)),))
    assert undo_inputs(g, (0,), {0: "x"}, "final") == (0,)


def test_an_unknown_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="rule must be one of"):
        undo_inputs(fx.Graph(), (), {}, "sometimes")


def _user_function(x: torch.Tensor) -> torch.Tensor:
    return x


@pytest.mark.parametrize(
    ("target", "args", "raises"),
    [
        (F.embedding, ("i", "w"), True),
        (F.cross_entropy, ("x", "y"), True),
        (torch.relu, ("x",), False),
        (F.batch_norm, ("x", "m", "v"), False),
        (operator.add, ("x", "y"), False),
        (operator.floordiv, ("x", "y"), True),  # (integer division by zero raises)
        (operator.getitem, ("x", 0), False),
        (operator.getitem, ("x", "i"), True),  # a tensor index: out of range raises
        (operator.getitem, ("x", (slice(0, 2), "i")), True),
        (_user_function, ("x",), True),
    ],
)
def test_which_operations_may_raise(target: object, args: tuple[object, ...], raises: bool) -> None:
    g = fx.Graph()
    names = {a for a in args if isinstance(a, str)} | {
        b for a in args if isinstance(a, tuple) for b in a if isinstance(b, str)
    }
    nodes = {n: g.placeholder(n) for n in sorted(names)}

    def arg(a: object) -> object:
        if isinstance(a, tuple):
            return tuple(arg(b) for b in a)
        return nodes[a] if isinstance(a, str) else a

    node = g.call_function(target, tuple(arg(a) for a in args))  # type: ignore[arg-type]
    assert may_raise(node) is raises


@pytest.mark.parametrize(
    ("rounding_mode", "dtype", "raises"),
    [
        (None, torch.int64, False),  # (true division: a float result, inf on zero)
        ("floor", torch.int64, True),  # (integer division by zero raises)
        ("trunc", torch.int32, True),
        ("floor", torch.float32, False),  # (inf on zero)
        ("trunc", None, True),  # (the result's dtype unknown)
    ],
)
def test_division_with_a_rounding_mode(
    rounding_mode: str | None, dtype: torch.dtype | None, raises: bool
) -> None:
    for target in (torch.div, "div", "div_"):
        g = fx.Graph()
        x, y = g.placeholder("x"), g.placeholder("y")
        kwargs = {"rounding_mode": rounding_mode}
        if isinstance(target, str):
            node = g.call_method(target, (x, y), kwargs)
        else:
            node = g.call_function(target, (x, y), kwargs)
        if dtype is not None:
            (x if target == "div_" else node).meta["dtype"] = dtype
        assert may_raise(node) is raises, target


TENSOR_METHODS = [("add_", False), ("lerp_", False), ("index_put_", True), ("scatter_", True)]


@pytest.mark.parametrize(("method", "raises"), TENSOR_METHODS)
def test_tensor_methods(method: str, raises: bool) -> None:
    g = fx.Graph()
    node = g.call_method(method, (g.placeholder("x"),))
    assert may_raise(node) is raises
