"""Unit tests for accesses and paths (_access.py)."""

from __future__ import annotations

import math

import pytest
from _refgraph_strategies import PROPERTY, WEIRD_NAMES, keys, names
from hypothesis import given

from magpy_refgraph import (
    Access,
    AccessKind,
    Attr,
    Builtin,
    Cell,
    Const,
    Global,
    Item,
    IterPos,
    Local,
    Path,
)


class TestAccessKind:
    def test_root_kinds(self) -> None:
        """LOCAL, GLOBAL, BUILTIN, CELL, CONST are root kinds; ATTR, ITEM, ITER are derived."""
        roots = {k for k in AccessKind if k.is_root}
        assert roots == {
            AccessKind.LOCAL,
            AccessKind.GLOBAL,
            AccessKind.BUILTIN,
            AccessKind.CELL,
            AccessKind.CONST,
        }


class TestConstructors:
    @pytest.mark.parametrize(
        ("access", "kind", "key"),
        [
            (Local("x"), AccessKind.LOCAL, "x"),
            (Global("g"), AccessKind.GLOBAL, "g"),
            (Builtin("len"), AccessKind.BUILTIN, "len"),
            (Cell("c"), AccessKind.CELL, "c"),
            (Attr("weight"), AccessKind.ATTR, "weight"),
            (Item(2), AccessKind.ITEM, 2),
            (IterPos(3), AccessKind.ITER, 3),
        ],
    )
    def test_constructor_sets_kind_and_key(
        self, access: Access, kind: AccessKind, key: object
    ) -> None:
        """Each constructor builds an Access of its kind with the given key and no scope."""
        assert (access.kind, access.key, access.scope) == (kind, key, None)

    def test_const_keeps_the_object(self) -> None:
        """Const(obj) stores the very object as its key."""
        obj = [1, 2]
        assert Const(obj).key is obj

    def test_scoped_constructors(self) -> None:
        """Global and Cell accept a scope object."""
        scope: dict[str, object] = {}
        assert Global("g", scope).scope is scope
        assert Cell("c", scope=len).scope is len

    @pytest.mark.parametrize(
        "bad", [lambda: Attr(1), lambda: Local(None), lambda: IterPos("0"), lambda: IterPos(True)]
    )
    def test_wrong_key_type_is_type_error(self, bad: object) -> None:
        """Name kinds need str keys and ITER needs an int."""
        with pytest.raises(TypeError):
            bad()  # type: ignore[operator]

    def test_negative_iter_position_is_value_error(self) -> None:
        """ITER positions must be non-negative."""
        with pytest.raises(ValueError, match=">= 0"):
            IterPos(-1)

    def test_scope_only_for_global_and_cell(self) -> None:
        """Only GLOBAL and CELL accesses take a scope."""
        with pytest.raises(ValueError, match="scope"):
            Access(AccessKind.ATTR, "x", scope={})

    def test_kind_must_be_an_access_kind(self) -> None:
        """A non-AccessKind kind is rejected."""
        with pytest.raises(TypeError):
            Access("attr", "x")  # type: ignore[arg-type]


class TestEquality:
    def test_item_keys_compare_like_dict_keys(self) -> None:
        """Item(1), Item(True) and Item(1.0) are the same dict slot, hence equal."""
        assert Item(1) == Item(True) == Item(1.0)
        assert hash(Item(1)) == hash(Item(True))
        assert Item(1) != Item(2)

    def test_kinds_distinguish(self) -> None:
        """Accesses with the same key but different kinds differ."""
        assert Attr("x") != Local("x")
        assert Item("x") != Attr("x")

    def test_nan_key_equal_to_itself_only(self) -> None:
        """A nan key is equal to the very same nan object, not to another nan."""
        nan = math.nan
        assert Item(nan) == Item(nan)
        assert Item(nan) != Item(float("nan"))

    def test_const_compares_by_identity(self) -> None:
        """Const accesses are equal only for the very same object."""
        a, b = [1], [1]
        assert Const(a) == Const(a)
        assert Const(a) != Const(b)
        x, y = float("1.5"), float("1.5")
        assert x == y and x is not y
        assert Const(x) != Const(y)

    def test_scope_compares_by_identity(self) -> None:
        """Global scopes compare by identity even when the dicts are equal."""
        d1: dict[str, int] = {"a": 1}
        d2: dict[str, int] = {"a": 1}
        assert Global("g", d1) == Global("g", d1)
        assert Global("g", d1) != Global("g", d2)
        assert Global("g", d1) != Global("g")
        assert len({Global("g", d1), Global("g", d1), Global("g", d2)}) == 2

    def test_unhashable_key_compares_by_identity(self) -> None:
        """Unhashable item keys (a slice before 3.12, a list) give hashable accesses compared by
        identity."""
        s = [1, 3]
        assert Item(s) == Item(s)
        assert Item(s) != Item([1, 3])
        assert hash(Item(s)) == hash(Item(s))

    def test_failing_eq_means_not_equal(self) -> None:
        """A key whose __eq__ raises compares unequal to other keys instead of raising."""

        class Weird:
            def __eq__(self, other: object) -> bool:
                raise RuntimeError("no")

            def __hash__(self) -> int:
                return 1

        a, b = Weird(), Weird()
        assert Item(a) == Item(a)
        assert Item(a) != Item(b)

    def test_not_equal_to_other_types(self) -> None:
        """An Access never equals a non-Access."""
        assert Attr("x") != "x"
        assert (Attr("x") == object()) is False

    @PROPERTY
    @given(keys, keys)
    def test_item_equality_mirrors_dict_lookup(self, a: object, b: object) -> None:
        """Item(b) finds Item(a) in a dict exactly when b finds a in a dict."""
        assert (Item(b) in {Item(a): 1}) == (b in {a: 1})


class TestLabels:
    @pytest.mark.parametrize(
        ("access", "text"),
        [
            (Attr("weight"), ".weight"),
            (Item(2), "[2]"),
            (Item("cfg"), "['cfg']"),
            (Global("name"), "G.name"),
            (Local("x"), "L.x"),
            (IterPos(3), "#3"),
            (Builtin("len"), "B.len"),
            (Cell("c"), "C.c"),
        ],
    )
    def test_str_is_a_short_label(self, access: Access, text: str) -> None:
        """str(access) gives the documented short label."""
        assert str(access) == text

    def test_const_label_shows_value(self) -> None:
        """A Const label shows the object's short repr."""
        assert str(Const([1, 2])) == "K([1, 2])"

    @pytest.mark.parametrize("name", WEIRD_NAMES)
    def test_weird_names_give_printable_labels(self, name: str) -> None:
        """Labels stay one printable line, even for newline or surrogate names."""
        for access in (Attr(name), Local(name), Item(name)):
            text = str(access)
            assert text.isprintable()
            assert len(text) < 80

    def test_label_of_unreprable_key(self) -> None:
        """A key whose repr raises still gets a label."""

        class Bad:
            def __repr__(self) -> str:
                raise ValueError("no repr")

        assert str(Item(Bad())) == "[<Bad object>]"
        assert str(Item(10**5000)) == "[<int object>]"

    def test_repr_looks_like_the_constructor(self) -> None:
        """repr(access) reads like the constructor call."""
        assert repr(Attr("w")) == "Attr('w')"
        assert repr(Item(2)) == "Item(2)"
        assert repr(Global("g", {})).startswith("Global('g', scope=<dict@0x")

    @PROPERTY
    @given(names, keys)
    def test_labels_are_always_printable(self, name: str, key: object) -> None:
        """Every label is printable, whatever the name or key."""
        for access in (Attr(name), Local(name), Item(key), Const(key)):
            assert str(access).isprintable()


class TestPath:
    def test_child_and_truediv_extend(self) -> None:
        """path / access and path.child(access) give the same longer path."""
        p = Path(Local("self"))
        assert p / Attr("layers") == p.child(Attr("layers"))
        assert (p / Attr("layers") / Item(2)).steps == (Attr("layers"), Item(2))

    def test_len_counts_root_and_steps(self) -> None:
        """len(path) counts the root access and every step."""
        assert len(Path(Local("x"))) == 1
        assert len(Path(Local("x")) / Attr("a") / Item(0)) == 3

    def test_parent(self) -> None:
        """parent drops the last step, and is None for a bare root."""
        p = Path(Local("x")) / Attr("a")
        assert p.parent == Path(Local("x"))
        assert Path(Local("x")).parent is None

    def test_str_is_readable(self) -> None:
        """str(path) concatenates the access labels."""
        p = Path(Local("self")) / Attr("layers") / Item(2) / Attr("weight")
        assert str(p) == "L.self.layers[2].weight"
        assert repr(p) == "Path(L.self.layers[2].weight)"

    def test_hash_and_equality_are_structural(self) -> None:
        """Equal accesses give equal, equally hashed paths."""
        a = Path(Global("CFG")) / Item("act")
        b = Path(Global("CFG")) / Item("act")
        assert a == b and hash(a) == hash(b)
        assert a != Path(Global("CFG")) / Item("other")

    def test_accesses_last_and_startswith(self) -> None:
        """accesses lists root first; last is the final access; startswith tests prefixes."""
        p = Path(Local("x")) / Attr("a") / Item(0)
        assert p.accesses == (Local("x"), Attr("a"), Item(0))
        assert p.last == Item(0)
        assert Path(Local("x")).last == Local("x")
        assert p.startswith(Path(Local("x")) / Attr("a"))
        assert p.startswith(p)
        assert not p.startswith(Path(Local("y")))
        assert not (Path(Local("x")) / Attr("a")).startswith(p)

    def test_root_must_be_a_root_access(self) -> None:
        """A path cannot start with a derived access."""
        with pytest.raises(ValueError, match="root"):
            Path(Attr("x"))

    def test_steps_must_be_derived(self) -> None:
        """A root access cannot appear as a step."""
        with pytest.raises(ValueError, match="derived"):
            Path(Local("x"), (Local("y"),))
        with pytest.raises(ValueError, match="derived"):
            Path(Local("x")) / Global("g")

    def test_steps_must_be_a_tuple(self) -> None:
        """Steps are a tuple, not a list."""
        with pytest.raises(TypeError, match="tuple"):
            Path(Local("x"), [Attr("a")])  # type: ignore[arg-type]

    def test_derived_paths_equal_constructed_ones(self) -> None:
        """``child`` and ``parent`` (built without re-checking every step) give paths equal,
        hash-equal and frozen like constructed ones; ``child`` still refuses a root access."""
        whole = Path(Local("x"), (Attr("a"), Item(0), Attr("b")))
        built = Path(Local("x")) / Attr("a") / Item(0) / Attr("b")
        assert built == whole and hash(built) == hash(whole)
        assert whole.parent == Path(Local("x"), (Attr("a"), Item(0)))
        assert hash(whole.parent) == hash(Path(Local("x"), (Attr("a"), Item(0))))
        assert {built: 1}[whole] == 1
        with pytest.raises(ValueError, match="derived"):
            whole.child(Local("y"))
        with pytest.raises(AttributeError):
            built.steps = ()  # type: ignore[misc]

    def test_paths_are_frozen(self) -> None:
        """Paths and accesses are immutable."""
        p = Path(Local("x"))
        with pytest.raises(AttributeError):
            p.root = Local("y")  # type: ignore[misc]
        with pytest.raises(AttributeError):
            Attr("a").key = "b"  # type: ignore[misc]
