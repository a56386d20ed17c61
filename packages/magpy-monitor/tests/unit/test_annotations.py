"""Unit tests for the annotation table (_annotations.py) and its effect on capture."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F

from magpy_monitor import TABLE, Annotation, AnnotationTable, Kind, capture, classify
from magpy_refgraph import Unsupported

_SEED_BUG = (
    "_TORCH_EFFECT_FUNCS (manual_seed, seed, initial_seed, save, load) is dead: these are Python "
    "functions in torch.random / torch.serialization, and _torch_rule's FunctionType branch "
    "returns None for modules other than torch._tensor / torch.nn.functional, so they are UNKNOWN "
    "and get inlined"
)


class TestTorchRules:
    @pytest.mark.parametrize(
        "fn",
        [torch.add, torch.relu, torch.cat, torch.matmul, torch.where, torch.softmax],
        ids=lambda f: f.__name__,
    )
    def test_torch_functions_are_ops(self, fn: object) -> None:
        """torch.* functions are AS_OP, recorded as call_function."""
        ann = classify(fn)
        assert ann.kind is Kind.AS_OP
        assert ann.method is None

    @pytest.mark.parametrize("name", ["add", "relu", "view", "sum", "matmul", "__getitem__"])
    def test_tensor_methods_are_ops_recorded_as_methods(self, name: str) -> None:
        """Tensor methods are AS_OP, recorded as call_method with their name."""
        ann = classify(getattr(torch.Tensor, name))
        assert ann.kind is Kind.AS_OP
        assert ann.method == name

    @pytest.mark.parametrize("fn", [F.relu, F.linear, F.softmax, F.layer_norm, F.dropout])
    def test_functional_is_op(self, fn: object) -> None:
        """torch.nn.functional functions (Python or native) are AS_OP."""
        assert classify(fn).kind is Kind.AS_OP

    @pytest.mark.parametrize("name", ["size", "dim", "numel", "stride", "is_contiguous"])
    def test_metadata_methods_are_meta(self, name: str) -> None:
        """Tensor.size/dim/... read metadata only: META."""
        assert classify(getattr(torch.Tensor, name)).kind is Kind.META

    @pytest.mark.parametrize("name", ["item", "tolist", "__bool__", "numpy"])
    def test_value_reads_are_value_read(self, name: str) -> None:
        """Tensor.item/tolist/__bool__ read tensor values into Python: VALUE_READ."""
        ann = classify(getattr(torch.Tensor, name))
        assert ann.kind is Kind.VALUE_READ
        assert name in ann.reason

    def test_bound_tensor_method_classified_like_the_unbound_one(self) -> None:
        """x.item (bound) is VALUE_READ and x.add (bound) is AS_OP like their unbound forms."""
        x = torch.ones(2)
        assert classify(x.item).kind is Kind.VALUE_READ
        assert classify(x.add).kind is Kind.AS_OP
        assert classify(x.size).kind is Kind.META

    def test_inplace_methods_mutate_and_return_self(self) -> None:
        """x.add_ mutates argument 0 and returns it; torch.relu_ likewise."""
        for fn in (torch.Tensor.add_, torch.relu_):
            ann = classify(fn)
            assert ann.kind is Kind.AS_OP
            assert ann.inplace == (0,)
            assert ann.returns_arg == 0

    def test_inplace_dunder_mutates_without_returning_arg(self) -> None:
        """Tensor.__iadd__ mutates argument 0."""
        ann = classify(torch.Tensor.__iadd__)
        assert ann.kind is Kind.AS_OP and ann.inplace == (0,)

    def test_is_grad_enabled_is_pure(self) -> None:
        """torch.is_grad_enabled is PURE (evaluated at record time, guarded)."""
        assert classify(torch.is_grad_enabled).kind is Kind.PURE

    @pytest.mark.parametrize("fn", [torch.manual_seed, torch.seed, torch.initial_seed, torch.save])
    def test_torch_effect_functions_are_effects(self, fn: object) -> None:
        """torch.manual_seed/seed/initial_seed/save have effects outside the program: EFFECT."""
        assert classify(fn).kind is Kind.EFFECT

    def test_aten_overloads_are_ops(self) -> None:
        """torch.ops.aten packets and overloads are AS_OP."""
        assert classify(torch.ops.aten.add).kind is Kind.AS_OP
        assert classify(torch.ops.aten.add.Tensor).kind is Kind.AS_OP

    @pytest.mark.parametrize("fn", [print, len, operator.add, lambda: 0])
    def test_non_torch_callables_are_unknown(self, fn: object) -> None:
        """Builtins, operator functions and user functions have no table entry: UNKNOWN."""
        assert classify(fn).kind is Kind.UNKNOWN

    def test_classify_is_stable(self) -> None:
        """Classifying the same callable twice gives equal annotations."""
        assert classify(torch.add) == classify(torch.add)


class TestTable:
    def test_register_overrides_a_rule_by_identity(self) -> None:
        """An identity entry wins over a rule, even after the rule's answer was memoised."""
        table = AnnotationTable()
        table.add_rule(lambda fn: Annotation(Kind.AS_OP) if fn is torch.sin else None)
        assert table.lookup(torch.sin).kind is Kind.AS_OP
        table.register(torch.sin, Annotation(Kind.PURE))
        assert table.lookup(torch.sin).kind is Kind.PURE
        assert table.lookup(torch.cos).kind is Kind.UNKNOWN

    def test_register_is_by_identity_not_equality(self) -> None:
        """Two equal bound methods are distinct objects: only the registered one matches."""
        x = torch.ones(1)
        first, second = x.add, x.add
        assert first == second and first is not second
        table = AnnotationTable()
        table.register(first, Annotation(Kind.EFFECT))
        assert table.lookup(first).kind is Kind.EFFECT
        assert table.lookup(second).kind is Kind.UNKNOWN

    def test_rules_are_consulted_in_order(self) -> None:
        """The first rule that answers decides."""
        table = AnnotationTable()
        table.add_rule(lambda fn: Annotation(Kind.META) if fn is len else None)
        table.add_rule(lambda fn: Annotation(Kind.EFFECT))
        assert table.lookup(len).kind is Kind.META
        assert table.lookup(print).kind is Kind.EFFECT

    def test_adding_a_rule_clears_the_memo(self) -> None:
        """A rule added later applies to callables already looked up."""
        table = AnnotationTable()
        assert table.lookup(abs).kind is Kind.UNKNOWN
        table.add_rule(lambda fn: Annotation(Kind.PURE) if fn is abs else None)
        assert table.lookup(abs).kind is Kind.PURE

    def test_annotation_is_frozen(self) -> None:
        """Annotations are immutable values."""
        ann = Annotation(Kind.AS_OP)
        with pytest.raises(AttributeError):
            ann.kind = Kind.PURE  # type: ignore[misc]
        assert ann == Annotation(Kind.AS_OP)


class TestAnnotationsDriveCapture:
    def test_effect_annotation_stops_capture_with_its_reason(self) -> None:
        """A user function registered as EFFECT stops capture, naming the reason."""

        def log_it(t: torch.Tensor) -> torch.Tensor:
            return t

        TABLE.register(log_it, Annotation(Kind.EFFECT, reason="log_it writes a log"))

        def f(x: torch.Tensor) -> torch.Tensor:
            return log_it(x) + 1

        result = capture(f, (torch.ones(2),), {})
        assert isinstance(result.failure, Unsupported)
        assert result.failure.reason == "log_it writes a log"
        assert torch.equal(result.value, torch.full((2,), 2.0))

    def test_as_op_annotation_records_one_graph_node(self) -> None:
        """A Python function registered as AS_OP is one call_function node, not inlined."""

        def fused(t: torch.Tensor) -> torch.Tensor:
            return t * 2 + 1

        TABLE.register(fused, Annotation(Kind.AS_OP))

        def f(x: torch.Tensor) -> torch.Tensor:
            return fused(x)

        result = capture(f, (torch.ones(2),), {})
        assert result.failure is None and result.graph is not None
        targets = [n.target for n in result.graph.nodes if n.op == "call_function"]
        assert targets == [fused]

    def test_manual_seed_breaks_at_the_users_line(self) -> None:
        """torch.seed() (EFFECT: it reseeds from the system's entropy) stops capture with the
        user's file and line; so does torch.manual_seed(0) where the capture does not assume
        values (``speculate=False``; otherwise the mock replays it: libs.stdlib.draws)."""

        def f(x: torch.Tensor) -> torch.Tensor:
            torch.seed()
            return x + 1

        def g(x: torch.Tensor) -> torch.Tensor:
            torch.manual_seed(0)
            return x + 1

        for fn, speculate in ((f, True), (g, False)):
            result = capture(fn, (torch.ones(2),), {}, speculate=speculate)
            assert isinstance(result.failure, Unsupported)
            assert result.failure.filename == fn.__code__.co_filename
            assert result.failure.lineno == fn.__code__.co_firstlineno + 1

    def test_value_read_stops_capture(self) -> None:
        """x.data_ptr() (VALUE_READ) stops capture but returns the real value; x.tolist()
        does too when values are not assumed (``speculate=False``)."""
        t = torch.ones(2)
        result = capture(lambda t: t.data_ptr(), (t,), {})
        assert isinstance(result.failure, Unsupported)
        assert result.value == t.data_ptr()
        result = capture(lambda t: t.tolist(), (torch.ones(2),), {}, speculate=False)
        assert isinstance(result.failure, Unsupported)
        assert result.value == [1.0, 1.0]

    def test_tolist_is_read_element_by_element(self) -> None:
        result = capture(lambda t: t.tolist(), (torch.ones(2),), {})
        assert result.failure is None and result.plan is not None
        assert result.plan.checks == ()  # returned as it is: nothing assumed
        assert result.value == [1.0, 1.0]


# ---------------------------------------------------------------------- against torch's schemas
def _schema_ops() -> list[tuple[str, object, bool]]:
    """Every Tensor method and ``torch.*`` function with ATen schemas that agree on whether
    the first argument is written in place: (label, callable, written)."""
    from magpy_monitor.core.annotations import writes_first_argument

    ops = []
    for owner, label in ((torch.Tensor, "Tensor"), (torch, "torch")):
        for name in dir(owner):
            fn = getattr(owner, name, None)
            if not callable(fn) or isinstance(fn, type):
                continue
            written = writes_first_argument(name)
            if written is not None:
                ops.append((f"{label}.{name}", fn, written))
    return ops


def test_every_op_with_a_schema_is_annotated_as_its_schema_says() -> None:
    """The in-place flag of each op's annotation is what the operator's schema says
    (``Tensor(a!) self``), for the ~1300 Tensor methods and torch functions that have one."""
    ops = _schema_ops()
    assert len(ops) > 1000
    wrong = []
    for label, fn, written in ops:
        ann = classify(fn)
        if ann.kind is Kind.AS_OP and (0 in ann.inplace) != written:
            wrong.append((label, written, ann.inplace))
    assert not wrong, wrong


@pytest.mark.parametrize(
    ("fn", "args"),
    [
        (torch._index_put_impl_, lambda: (torch.zeros(3), (torch.tensor([1]),), torch.ones(1))),
        (torch.Tensor.index_put_, lambda: (torch.zeros(3), (torch.tensor([1]),), torch.ones(1))),
        (torch.Tensor.add_, lambda: (torch.zeros(3), 1)),
        (torch.Tensor.add, lambda: (torch.zeros(3), 1)),
    ],
    ids=["_index_put_impl_", "index_put_", "add_", "add"],
)
def test_an_op_changes_its_first_argument_exactly_when_annotated(fn: object, args: object) -> None:
    """Behaviour, not names: running the op changes its first argument iff it is annotated in
    place (``_index_put_impl_`` is private, so the naming rule alone would miss it)."""
    first, *rest = args()  # type: ignore[operator]
    before = first.clone()
    fn(first, *rest)  # type: ignore[operator]
    assert (0 in classify(fn).inplace) == (not torch.equal(first, before))
