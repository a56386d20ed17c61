"""Unit tests for rendering paths as safe Python expressions (_render.py)."""

from __future__ import annotations

import ast
import math
import random
import struct
from typing import Any

import pytest
from _refgraph_strategies import (
    PROPERTY,
    WEIRD_NAMES,
    IntKey,
    Obj,
    StrKey,
    World,
    build_from_world,
    keys,
    names,
    resolve,
    worlds,
)
from hypothesis import given
from hypothesis import strategies as st

from magpy_refgraph import (
    Access,
    Attr,
    Builtin,
    Cell,
    Const,
    Global,
    InternalError,
    Item,
    IterPos,
    Local,
    Path,
    RenderContext,
    SimpleRenderContext,
    Unsupported,
    entry_paths,
    iter_remaining,
    literal_expr,
    render_path,
    render_step,
)

ALLOWED_NAMES = {"L", "G", "B", "K", "getattr", "frozenset"}


def assert_safe(src: str) -> None:
    """``src`` parses as one expression made only of harmless node types."""
    tree = ast.parse(src, mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            assert node.id in ALLOWED_NAMES, src
        elif isinstance(node, ast.Call):
            assert isinstance(node.func, ast.Name) and node.func.id in {"getattr", "frozenset"}, src
        else:
            allowed = (
                ast.Expression, ast.Subscript, ast.Attribute, ast.Constant, ast.Tuple,
                ast.Set, ast.UnaryOp, ast.USub, ast.Load,
            )  # fmt: skip
            assert isinstance(node, allowed), (src, type(node))


def render(path: Path, ctx: SimpleRenderContext | None = None) -> str:
    return render_path(path, ctx or SimpleRenderContext())


class TestRoots:
    @pytest.mark.parametrize(
        ("access", "src"),
        [
            (Local("x"), "L['x']"),
            (Global("x"), "G['x']"),
            (Builtin("len"), "B['len']"),
        ],
    )
    def test_name_roots(self, access: Access, src: str) -> None:
        """LOCAL/GLOBAL/BUILTIN render as subscripts of L/G/B."""
        assert render(Path(access)) == src

    def test_scoped_global_goes_through_consts(self) -> None:
        """A GLOBAL with a scope renders as K[i]['x'] with the scope dict interned."""
        ctx = SimpleRenderContext()
        scope = {"x": 1}
        assert render(Path(Global("x", scope)), ctx) == "K[0]['x']"
        assert ctx.consts[0] is scope

    def test_const_root(self) -> None:
        """A CONST root renders as K[i] holding the very object."""
        ctx = SimpleRenderContext()
        obj = object()
        assert render(Path(Const(obj)), ctx) == "K[0]"
        assert ctx.consts == [obj]

    def test_cell_root_uses_closure_index(self) -> None:
        """A CELL renders as K[i].__closure__[j].cell_contents with j from co_freevars."""
        a, b = object(), object()

        def fn() -> tuple[object, object]:
            return a, b

        ctx = SimpleRenderContext()
        src = render(Path(Cell("b", scope=fn)), ctx)
        j = fn.__code__.co_freevars.index("b")
        assert src == f"K[0].__closure__[{j}].cell_contents"
        assert eval(src, ctx.eval_globals()) is b

    def test_cell_without_function_is_unsupported(self) -> None:
        """A CELL with no function scope cannot be rendered."""
        with pytest.raises(Unsupported, match="no function scope"):
            render(Path(Cell("c")))
        with pytest.raises(Unsupported):
            render(Path(Cell("c", scope=len)))

    def test_cell_not_a_freevar_is_unsupported(self) -> None:
        """A CELL name that is not a free variable of the function is Unsupported."""

        def fn() -> None:
            return None

        with pytest.raises(Unsupported, match="not a free variable"):
            render(Path(Cell("zz", scope=fn)))

    def test_root_expr_rejects_derived_access(self) -> None:
        """root_expr on a derived access is an InternalError."""
        with pytest.raises(InternalError):
            SimpleRenderContext().root_expr(Attr("x"))

    def test_custom_namespace_names(self) -> None:
        """The four namespace names are configurable."""
        ctx = SimpleRenderContext("loc", "glob", "bi", "consts")
        assert render(Path(Local("x")), ctx) == "loc['x']"
        assert render(Path(Builtin("x")), ctx) == "bi['x']"
        assert render(Path(Const(1.5)), ctx) == "consts[0]"
        assert set(ctx.eval_globals(1, 2, 3)) == {"loc", "glob", "bi", "consts"}

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"locals_name": "class"},
            {"globals_name": "a b"},
            {"consts_name": ""},
            {"builtins_name": "L"},
        ],
    )
    def test_bad_namespace_names_rejected(self, kwargs: dict[str, str]) -> None:
        """Namespace names must be distinct, non-keyword identifiers."""
        with pytest.raises(ValueError):
            SimpleRenderContext(**kwargs)

    def test_consts_interned_by_identity(self) -> None:
        """The same object is interned once; equal but distinct objects get separate slots."""
        ctx = SimpleRenderContext()
        a, b = [1], [1]
        assert ctx.const_expr(a) == ctx.const_expr(a) == "K[0]"
        assert ctx.const_expr(b) == "K[1]"

    def test_simple_context_satisfies_protocol(self) -> None:
        """SimpleRenderContext is a RenderContext."""
        assert isinstance(SimpleRenderContext(), RenderContext)

    def test_custom_context_is_used(self) -> None:
        """render_path works with any object implementing the protocol."""

        class Ctx:
            def root_expr(self, access: Access) -> str:
                return f"frame_{access.key}"

            def const_expr(self, obj: object) -> str:
                return "CONST"

        assert render_path(Path(Local("x")) / Item(Obj()), Ctx()) == "frame_x[CONST]"


class TestAttrSteps:
    @pytest.mark.parametrize("name", ["weight", "_x", "__class__", "match", "_", "x1"])
    def test_plain_identifiers_use_dot(self, name: str) -> None:
        """Plain ASCII non-keyword identifiers render as e.name."""
        assert render(Path(Local("x")) / Attr(name)) == f"L['x'].{name}"

    @pytest.mark.parametrize(
        "name", ["class", "None", "a b", "", "0abc", "ﬁ", "é", "__p", "x\ny", "x" * 300]
    )
    def test_other_names_use_getattr(self, name: str) -> None:
        """Keywords, non-identifiers, non-ASCII, mangled and long names use getattr()."""
        src = render(Path(Local("x")) / Attr(name))
        assert src.startswith("getattr(L['x'], ")
        assert_safe(src)

    def test_str_subclass_name_goes_through_consts(self) -> None:
        """An attribute name of a str subclass is passed through the constants table."""
        ctx = SimpleRenderContext()
        name = StrKey("w")
        assert render(Path(Local("x")) / Attr(name), ctx) == "getattr(L['x'], K[0])"
        assert ctx.consts[0] is name

    @pytest.mark.parametrize("name", WEIRD_NAMES)
    def test_weird_attribute_round_trips(self, name: str) -> None:
        """getattr rendering of every weird name reaches the attribute set with setattr."""
        obj, value = Obj(), object()
        setattr(obj, name, value)
        ctx = SimpleRenderContext()
        src = render(Path(Local("o")) / Attr(name), ctx)
        assert_safe(src)
        assert eval(src, ctx.eval_globals({"o": obj})) is value


class TestItemSteps:
    @pytest.mark.parametrize(
        ("key", "src"),
        [
            (2, "[2]"),
            (-1, "[-1]"),
            (True, "[True]"),
            (None, "[None]"),
            (1.5, "[1.5]"),
            (-0.0, "[-0.0]"),
            ("cfg", "['cfg']"),
            (b"k", "[b'k']"),
            ((1, "a"), "[(1, 'a')]"),
            ((1,), "[(1,)]"),
            ((), "[()]"),
            (frozenset(), "[frozenset()]"),
            (frozenset({2, 1}), "[frozenset({1, 2})]"),
        ],
    )
    def test_literal_keys_are_inlined(self, key: object, src: str) -> None:
        """Literal keys render as e[<literal>]."""
        assert render(Path(Local("d")) / Item(key)) == "L['d']" + src

    @pytest.mark.parametrize(
        "key",
        [
            math.inf,
            -math.inf,
            math.nan,
            10**5000,
            2**200,
            "x" * 500,
            StrKey("a"),
            IntKey(1),
            (1, math.nan),
            1j,
            object(),
        ],
        ids=[
            "inf",
            "-inf",
            "nan",
            "huge",
            "2**200",
            "long-str",
            "str-sub",
            "int-sub",
            "nan-tuple",
            "complex",
            "object",
        ],
    )
    def test_other_keys_go_through_consts(self, key: object) -> None:
        """Non-literal keys render as e[K[i]] with the very key object."""
        ctx = SimpleRenderContext()
        assert render(Path(Local("d")) / Item(key), ctx) == "L['d'][K[0]]"
        assert ctx.consts[0] is key

    def test_iter_renders_as_a_look_ahead(self) -> None:
        """ITER #k renders as element k of what the iterator will still produce."""
        ctx = SimpleRenderContext()
        expr = render(Path(Local("it")) / IterPos(1), ctx)
        assert expr == "K[0](L['it'])[1]"
        assert ctx.consts[0] is iter_remaining
        it = iter(["a", "b", "c", "d"])
        next(it)
        assert eval(expr, {"K": ctx.consts, "L": {"it": it}}) == "c"
        assert next(it) == "b"  # looking ahead did not advance it

    @pytest.mark.parametrize(
        "make",
        [
            lambda: iter([1, 2, 3, 4]),
            lambda: iter((1, 2, 3, 4)),
            lambda: iter(range(1, 5)),
            lambda: iter({1: "a", 2: "b", 3: "c", 4: "d"}),
            lambda: iter({"a": 1, "b": 2, "c": 3, "d": 4}.values()),
            lambda: iter({1: 1, 2: 2, 3: 3, 4: 4}.items()),
            lambda: enumerate(iter({"a": 1, "b": 2, "c": 3, "d": 4}.values()), 7),
            lambda: zip([1, 2, 3, 4, 5], iter(range(4)), strict=False),
            lambda: zip(enumerate(["a", "b", "c", "d"]), (9, 8, 7, 6), strict=True),
        ],
    )
    def test_iter_remaining_of_builtin_iterators(self, make: Any) -> None:
        """iter_remaining tells what is left at every position, exhaustion included."""
        expected = list(make())
        it = make()
        for consumed in range(len(expected) + 2):
            assert list(iter_remaining(it)) == expected[consumed:]
            next(it, None)

    def test_iter_remaining_refuses_other_iterators(self) -> None:
        """Generators and user iterators cannot be looked into, nor what draws from them, nor a
        strict zip that would raise at its end."""
        with pytest.raises(TypeError, match="look ahead"):
            iter_remaining(x for x in range(3))
        with pytest.raises(TypeError, match="look ahead"):
            iter_remaining(enumerate(x for x in range(3)))
        with pytest.raises(TypeError, match="look ahead"):
            iter_remaining(zip([1, 2], [1], strict=True))

    def test_render_step_rejects_root_access(self) -> None:
        """render_step on a root access is an InternalError."""
        with pytest.raises(InternalError):
            render_step("v", Local("x"), SimpleRenderContext())

    def test_render_step_on_a_variable(self) -> None:
        """render_step appends one access to any primary expression."""
        ctx = SimpleRenderContext()
        assert render_step("v3", Attr("w"), ctx) == "v3.w"
        assert render_step("v3", Item("k"), ctx) == "v3['k']"


literal_atoms = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
    st.binary(),
)
literals = st.recursive(
    literal_atoms,
    lambda inner: st.one_of(
        st.tuples(inner), st.tuples(inner, inner), st.frozensets(literal_atoms, max_size=3)
    ),
    max_leaves=6,
)


def _same(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


class TestProperties:
    @PROPERTY
    @given(literals)
    def test_literal_expr_round_trips_exactly(self, value: object) -> None:
        """literal_expr source evaluates to an equal value of the same type (floats bit-exact)."""
        src = literal_expr(value)
        if src is None:
            return
        assert_safe(src)
        assert _same(eval(src, {}), value)

    @PROPERTY
    @given(names, keys)
    def test_rendering_never_injects(self, name: str, key: object) -> None:
        """Any name or key renders to a single harmless expression."""
        path = Path(Local(name)) / Attr(name) / Item(key) / Item(name)
        assert_safe(render(path))
        assert_safe(render(Path(Global(name, {})) / Attr(name)))

    @PROPERTY
    @given(worlds(), st.randoms(use_true_random=False))
    def test_rendered_paths_evaluate_to_the_same_object(
        self, world: World, rnd: random.Random
    ) -> None:
        """Every entry path of a random object graph renders to code that yields the object (is)."""
        built = build_from_world(world, rnd)
        ctx = SimpleRenderContext()
        env = ctx.eval_globals(world.locals, world.globals, world.builtins)
        for node, obj in built.obj_of.items():
            for path in entry_paths(built.graph, node, limit=8):
                assert resolve(world, path) is obj
                src = render_path(path, ctx)
                assert_safe(src)
                assert eval(src, env) is obj, (str(path), src)
