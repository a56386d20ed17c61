"""Unit tests for guard requirements and guard sets (_guards.py)."""

from __future__ import annotations

import itertools
import math

import pytest
from _refgraph_strategies import PAYLOADS, PROPERTY
from hypothesis import given
from hypothesis import strategies as st

from magpy_refgraph import (
    Attr,
    GuardKind,
    GuardReq,
    GuardSet,
    Item,
    IterLen,
    Local,
    ModuleCall,
    ModuleNoHooks,
    Outcome,
    Path,
    SetItems,
    SetOrder,
    set_contents,
    set_order,
)

X = Path(Local("x"))
XA = X / Attr("a")
XA0 = XA / Item(0)


class TestGuardKind:
    def test_cost_order(self) -> None:
        """Costs order the kinds ID, TYPE, NONE, VALUE, LEN, KEYS, HASATTR, TENSOR_META, CUSTOM."""
        order = [
            GuardKind.ID,
            GuardKind.TYPE,
            GuardKind.NONE,
            GuardKind.VALUE,
            GuardKind.LEN,
            GuardKind.KEYS,
            GuardKind.HASATTR,
            GuardKind.TENSOR_META,
            GuardKind.CUSTOM,
        ]
        costs = [kind.cost for kind in order]
        assert costs == sorted(costs) and len(set(costs)) == len(costs)

    def test_negated_kinds_cost_like_their_positive(self) -> None:
        """NOT_NONE costs like NONE and NOT_HASATTR like HASATTR."""
        assert GuardKind.NOT_NONE.cost == GuardKind.NONE.cost
        assert GuardKind.NOT_HASATTR.cost == GuardKind.HASATTR.cost


class TestGuardReq:
    def test_equal_requirements_are_equal_and_hash_alike(self) -> None:
        """Same path, kind and payload give equal, equally hashed requirements."""
        a = GuardReq(X, GuardKind.LEN, 3)
        b = GuardReq(Path(Local("x")), GuardKind.LEN, 3)
        assert a == b and hash(a) == hash(b)

    def test_value_payload_type_exact(self) -> None:
        """VALUE payloads 1, True and 1.0 are different requirements."""
        reqs = {GuardReq(X, GuardKind.VALUE, v) for v in (1, True, 1.0)}
        assert len(reqs) == 3

    def test_value_payload_floats_bit_exact(self) -> None:
        """0.0 and -0.0 differ; two nan objects with the same bits are the same requirement."""
        assert GuardReq(X, GuardKind.VALUE, 0.0) != GuardReq(X, GuardKind.VALUE, -0.0)
        assert GuardReq(X, GuardKind.VALUE, math.nan) == GuardReq(X, GuardKind.VALUE, float("nan"))

    def test_tuple_payload_compares_elementwise_type_exact(self) -> None:
        """Tuple payloads compare element types too: (1,) differs from (True,)."""
        assert GuardReq(X, GuardKind.KEYS, ("a", 1)) == GuardReq(X, GuardKind.KEYS, ("a", 1))
        assert GuardReq(X, GuardKind.KEYS, (1,)) != GuardReq(X, GuardKind.KEYS, (True,))

    def test_id_payload_by_identity(self) -> None:
        """ID payloads compare by identity, even for equal values."""
        a = 10**20
        b = int(str(a))
        assert a == b and a is not b
        assert GuardReq(X, GuardKind.ID, a) != GuardReq(X, GuardKind.ID, b)
        assert GuardReq(X, GuardKind.ID, a) == GuardReq(X, GuardKind.ID, a)

    def test_type_payload_by_identity(self) -> None:
        """TYPE payloads compare by identity of the class."""
        assert GuardReq(X, GuardKind.TYPE, int) == GuardReq(X, GuardKind.TYPE, int)
        assert GuardReq(X, GuardKind.TYPE, int) != GuardReq(X, GuardKind.TYPE, bool)

    def test_unhashable_payload_by_identity(self) -> None:
        """Unhashable payloads compare by identity, and the requirement is still hashable."""
        p, q = [1, 2], [1, 2]
        assert GuardReq(X, GuardKind.KEYS, p) == GuardReq(X, GuardKind.KEYS, p)
        assert GuardReq(X, GuardKind.KEYS, p) != GuardReq(X, GuardKind.KEYS, q)
        assert isinstance(hash(GuardReq(X, GuardKind.KEYS, p)), int)

    def test_kind_and_path_distinguish(self) -> None:
        """Different kinds or paths make different requirements."""
        assert GuardReq(X, GuardKind.NONE) != GuardReq(X, GuardKind.NOT_NONE)
        assert GuardReq(X, GuardKind.NONE) != GuardReq(XA, GuardKind.NONE)

    def test_payload_defaults_to_none(self) -> None:
        """The payload is optional (NONE/NOT_NONE need none)."""
        assert GuardReq(X, GuardKind.NONE).payload is None

    def test_bad_fields_rejected(self) -> None:
        """A non-Path path or non-GuardKind kind raises TypeError."""
        with pytest.raises(TypeError):
            GuardReq("L.x", GuardKind.NONE)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            GuardReq(X, "none")  # type: ignore[arg-type]

    def test_str_and_repr(self) -> None:
        """str shows 'path: KIND payload'; repr abbreviates the payload."""
        req = GuardReq(XA, GuardKind.LEN, 3)
        assert str(req) == "L.x.a: LEN 3"
        assert "x" * 100 not in repr(GuardReq(X, GuardKind.VALUE, "x" * 1000))

    def test_not_equal_to_other_types(self) -> None:
        """A GuardReq never equals a non-GuardReq."""
        assert GuardReq(X, GuardKind.NONE) != (X, GuardKind.NONE, None)


def _custom(payload: object) -> GuardReq:
    return GuardReq(X, GuardKind.CUSTOM, payload)


class TestCustomPayloads:
    def test_equal_payloads_deduplicate(self) -> None:
        """Equal payloads of one class are one requirement; classes and fields distinguish."""
        fn = abs
        reqs = [
            *(ModuleNoHooks(), ModuleNoHooks(), ModuleCall(), ModuleCall(own_forward=False)),
            *(ModuleCall(own_forward=True), IterLen(True, 3), IterLen(True, 3), IterLen(False, 3)),
            *(Outcome(fn, True), Outcome(fn, True), SetItems(set_contents({1, 2}))),
            *(SetItems(set_contents({2, 1})), SetOrder(set_order([1, 2]))),
            SetOrder(set_order([2, 1])),
        ]
        assert len(GuardSet(_custom(p) for p in reqs)) == 9

    def test_fields_compare_type_exact_and_floats_bit_exact(self) -> None:
        """Like tuple payloads: True and 1, 0.0 and -0.0 in a field are different checks."""
        assert _custom(Outcome(abs, True)) != _custom(Outcome(abs, 1))
        assert _custom(Outcome(abs, 0.0)) != _custom(Outcome(abs, -0.0))
        assert _custom(IterLen(True, 1)) != _custom(IterLen(1, 1))  # type: ignore[arg-type]
        assert _custom(SetItems(set_contents({1}))) != _custom(SetItems(set_contents({1.0})))

    def test_unhashable_field_compares_by_identity(self) -> None:
        """A payload with an unhashable field is compared by identity, like a tuple's."""
        value: list[int] = []
        a = Outcome(abs, value)
        assert _custom(a) == _custom(a)
        assert _custom(a) != _custom(Outcome(abs, value))

    def test_str_names_the_payload(self) -> None:
        """str of a requirement shows the payload's class and fields."""
        assert str(_custom(ModuleNoHooks())) == "L.x: CUSTOM ModuleNoHooks()"
        assert str(_custom(IterLen(False, 2))) == (
            "L.x: CUSTOM IterLen(exact=False, n=2, below=None)"
        )
        assert str(_custom(ModuleCall(own_forward=True))) == (
            "L.x: CUSTOM ModuleCall(own_forward=True, grad_off=False)"
        )

    def test_payloads_are_frozen(self) -> None:
        """Payloads cannot be changed after they are made."""
        with pytest.raises(AttributeError):
            IterLen(True, 1).n = 2  # type: ignore[misc]


class TestGuardSet:
    def test_add_deduplicates(self) -> None:
        """add() returns False for a requirement already present and len stays."""
        gs = GuardSet()
        assert gs.add(GuardReq(X, GuardKind.LEN, 2)) is True
        assert gs.add(GuardReq(X, GuardKind.LEN, 2)) is False
        assert len(gs) == 1

    def test_iteration_order_depth_then_cost_then_insertion(self) -> None:
        """Iteration sorts by path length, then kind cost, then insertion order."""
        reqs = [
            GuardReq(XA0, GuardKind.ID, 1),
            GuardReq(XA, GuardKind.LEN, 2),
            GuardReq(X, GuardKind.CUSTOM, "c"),
            GuardReq(XA, GuardKind.TYPE, list),
            GuardReq(X, GuardKind.TYPE, object),
            GuardReq(X, GuardKind.HASATTR, "a"),
            GuardReq(X, GuardKind.HASATTR, "b"),
        ]
        gs = GuardSet(reqs)
        assert [str(r) for r in gs] == [
            "L.x: TYPE <class 'object'>",
            "L.x: HASATTR 'a'",
            "L.x: HASATTR 'b'",
            "L.x: CUSTOM 'c'",
            "L.x.a: TYPE <class 'list'>",
            "L.x.a: LEN 2",
            "L.x.a[0]: ID 1",
        ]

    def test_a_custom_payload_may_cost_less(self) -> None:
        """``IterLen`` (which chunk of a split loop a record serves) costs a ``len()``: it
        comes before the tensor checks of its path length, other custom checks after them."""
        reqs = [
            GuardReq(X, GuardKind.CUSTOM, Outcome(abs, True)),
            GuardReq(X, GuardKind.TENSOR_META, "meta"),
            GuardReq(X, GuardKind.CUSTOM, IterLen(False, 2, below=4)),
            GuardReq(X, GuardKind.TYPE, object),
        ]
        kinds = [(r.kind, type(r.payload)) for r in GuardSet(reqs)]
        assert kinds == [
            (GuardKind.TYPE, type),
            (GuardKind.CUSTOM, IterLen),
            (GuardKind.TENSOR_META, str),
            (GuardKind.CUSTOM, Outcome),
        ]

    def test_contains_update_paths(self) -> None:
        """update() adds many; `in` tests membership; paths() lists distinct paths in order."""
        gs = GuardSet()
        gs.update([GuardReq(XA, GuardKind.LEN, 1), GuardReq(X, GuardKind.TYPE, int)])
        assert GuardReq(XA, GuardKind.LEN, 1) in gs
        assert GuardReq(XA, GuardKind.LEN, 2) not in gs
        assert "x" not in gs
        assert gs.paths() == [X, XA]

    def test_equality_ignores_order(self) -> None:
        """Two sets with the same requirements are equal; GuardSet is unhashable."""
        a = GuardReq(X, GuardKind.TYPE, int)
        b = GuardReq(XA, GuardKind.LEN, 1)
        assert GuardSet([a, b]) == GuardSet([b, a])
        assert GuardSet([a]) != GuardSet([b])
        with pytest.raises(TypeError):
            hash(GuardSet())

    def test_add_rejects_non_requirements(self) -> None:
        """Adding something that is not a GuardReq is a TypeError."""
        with pytest.raises(TypeError):
            GuardSet().add((X, GuardKind.NONE))  # type: ignore[arg-type]

    def test_iteration_is_a_snapshot(self) -> None:
        """Adding while iterating does not break the running iteration."""
        gs = GuardSet([GuardReq(X, GuardKind.TYPE, int)])
        for req in gs:
            gs.add(GuardReq(req.path / Attr("a"), GuardKind.LEN, 1))
        assert len(gs) == 2

    def test_repr_lists_requirements(self) -> None:
        """repr shows the requirements in order."""
        assert repr(GuardSet([GuardReq(X, GuardKind.LEN, 1)])) == "GuardSet([L.x: LEN 1])"

    @PROPERTY
    @given(
        st.lists(
            st.tuples(
                st.sampled_from([X, XA, XA0, Path(Local("y"))]),
                st.sampled_from(list(GuardKind)),
                st.sampled_from(PAYLOADS),
            ),
            max_size=30,
        )
    )
    def test_order_and_dedupe_property(self, triples: list[tuple[Path, GuardKind, object]]) -> None:
        """Iteration is sorted by (depth, cost), stable, and has each distinct requirement once."""
        reqs = [GuardReq(p, k, v) for p, k, v in triples]
        gs = GuardSet(reqs)
        out = list(gs)
        assert len(out) == len(gs) == len(set(reqs))
        keys = [(len(r.path), r.kind.cost) for r in out]
        assert keys == sorted(keys)
        first_seen = list(dict.fromkeys(reqs))
        for a, b in itertools.pairwise(out):
            if (len(a.path), a.kind.cost) == (len(b.path), b.kind.cost):
                assert first_seen.index(a) < first_seen.index(b)
