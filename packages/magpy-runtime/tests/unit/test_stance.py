"""The compiler's stance and the record limit, unit by unit (_stance.py; _config.record_limit).

The end-to-end behaviour of each stance, marker and limit is in integration/test_stance.py,
test_mark_dynamic.py and test_recompile_limit.py."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import torch
import torch._dynamo.config as dynamo_config

import magpy_runtime as magpy
from magpy_monitor import dim_key
from magpy_refgraph import Item, Local, Path
from magpy_runtime._config import record_limit
from magpy_runtime.cache._stance import changed_between, check, current, example_of

ARGS = Path(Local("args"))


@pytest.fixture(autouse=True)
def _default_stance() -> Iterator[None]:
    torch.compiler.set_stance("default")
    yield
    torch.compiler.set_stance("default")


class TestExamples:
    def test_an_example_names_sizes_and_scalars_by_entry_path(self) -> None:
        """Tensors and int/float values in the arguments, nested lists and dicts too."""
        got = example_of((torch.ones(2, 3), 4, [torch.ones(5)]), {"k": {"s": 1.5}})
        assert got == {
            ARGS / Item(0): (2, 3),
            ARGS / Item(1): 4,
            ARGS / Item(2) / Item(0): (5,),
            Path(Local("kwargs")) / Item("k") / Item("s"): 1.5,
        }

    def test_what_changed_between_two_examples(self) -> None:
        """A size that changed (same rank), a scalar of the same type; nothing else."""
        first = example_of((torch.ones(2, 3), 4, torch.ones(3), 1), {})
        now = example_of((torch.ones(7, 3), 5, torch.ones(3, 1), 1.0), {})
        x = ARGS / Item(0)
        assert changed_between(first, now) == {dim_key(x, 0), ARGS / Item(1)}


class TestStance:
    def test_the_default_stance_reads_as_none(self) -> None:
        assert current() is None
        with torch.compiler.set_stance("force_eager"):
            assert current().stance == "force_eager"
        assert current() is None

    def test_refused_stances(self) -> None:
        with pytest.raises(magpy.StanceError, match="skip_guard_eval_unsafe"):
            check(SimpleNamespace(stance="default", skip_guard_eval_unsafe=True, backend=None))
        with pytest.raises(magpy.StanceError, match=r"invalid torch\.compile stance"):
            check(SimpleNamespace(stance="nope", skip_guard_eval_unsafe=False, backend=None))

    def test_magpy_set_stance_sets_torchs_stance(self) -> None:
        """One state: magpy.set_stance is torch.compiler.set_stance (checked first)."""
        with magpy.set_stance("eager_on_recompile"):
            assert torch._dynamo.eval_frame._stance.stance == "eager_on_recompile"
        assert current() is None


class TestRecordLimit:
    @pytest.mark.parametrize(
        ("mine", "theirs", "want"),
        [
            (8, 8, (8, "magpy.config.max_records (default)")),
            (3, 8, (3, "magpy.config.max_records")),
            (8, 12, (12, "torch._dynamo.config.recompile_limit")),
            (4, 6, (4, "magpy.config.max_records")),
            (6, 4, (4, "torch._dynamo.config.recompile_limit")),
        ],
    )
    def test_precedence(self, mine: int, theirs: int, want: tuple[int, str]) -> None:
        with magpy.config.patch(max_records=mine), dynamo_config.patch(recompile_limit=theirs):
            assert record_limit() == want
