"""Model outputs built in the run (transformers' ``ModelOutput``, diffusers' ``BaseOutput``): a hit
builds them from their final state, without the library's Python (``libs/transformers/outputs``),
unless the class brings code of its own, whose effects a hit must then repeat."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

import magpy

transformers = pytest.importorskip("transformers")
from transformers.modeling_outputs import BaseModelOutput, BaseModelOutputWithPast  # noqa: E402
from transformers.utils.generic import ModelOutput  # noqa: E402


@contextmanager
def _frames_in(filename: str) -> Iterator[list[str]]:
    seen: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename == filename:
            seen.append(frame.f_code.co_name)

    old = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(old)


def _eq(a: Any, b: Any) -> bool:
    if isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and torch.equal(a, b)
    if isinstance(b, tuple):
        return type(a) is tuple and len(a) == len(b) and all(map(_eq, a, b))
    return bool(a == b)


def _same_output(got: Any, want: Any) -> None:
    assert type(got) is type(want)
    assert list(got.keys()) == list(want.keys())
    for k in want:
        assert _eq(got[k], want[k]), k
    assert vars(got).keys() == vars(want).keys()


GENERIC = sys.modules["transformers.utils.generic"].__file__


def test_a_hit_builds_a_model_output_without_the_librarys_code() -> None:
    def f(x: torch.Tensor) -> Any:
        h = x.relu()
        return BaseModelOutput(last_hidden_state=h * 2, hidden_states=(x, h))

    compiled = magpy.compile(f, backend="eager")
    for i in range(4):
        x = torch.randn(3, 4)
        want = f(x)
        with _frames_in(GENERIC) as ran:
            got = compiled(x)
        _same_output(got, want)
        assert got.hidden_states[0] is x
        if i > 0:
            assert ran == [], f"call {i} ran transformers' code: {ran}"
    st = magpy.stats(compiled)
    assert (st.records, st.hits, st.breaks) == (1, 3, 0)


def test_a_deprecated_field_name_is_renamed_on_a_hit_too() -> None:
    def f(x: torch.Tensor) -> Any:
        return BaseModelOutputWithPast(last_hidden_state=x + 1, past_key_values=(x,))

    compiled = magpy.compile(f, backend="eager")
    for _ in range(3):
        x = torch.randn(2)
        want, got = f(x), compiled(x)
        _same_output(got, want)
        assert got.cache[0] is x
    assert magpy.stats(compiled).hits == 2


BUILT: list[int] = []


@dataclasses.dataclass
class CountedOutput(ModelOutput):
    """An output class with a ``__post_init__`` of its own, which has an effect."""

    logits: torch.Tensor | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        BUILT.append(1)


def test_an_output_class_with_its_own_code_is_still_built_by_calling_it() -> None:
    def f(x: torch.Tensor) -> Any:
        return CountedOutput(logits=x.sin())

    compiled = magpy.compile(f, backend="eager")
    for i in range(3):
        x = torch.randn(2)
        del BUILT[:]
        want = f(x)
        got = compiled(x)
        _same_output(got, want)
        assert len(BUILT) == 2, f"call {i}: the program's __post_init__ ran {len(BUILT)} times"
    assert magpy.stats(compiled).hits == 2


def test_a_diffusers_output_is_built_from_its_state() -> None:
    outputs = pytest.importorskip("diffusers.utils.outputs")
    from diffusers.models.unets.unet_2d import UNet2DOutput

    def f(x: torch.Tensor) -> Any:
        return UNet2DOutput(sample=x * 3)

    compiled = magpy.compile(f, backend="eager")
    for i in range(3):
        x = torch.randn(2)
        want = f(x)
        with _frames_in(outputs.__file__) as ran:
            got = compiled(x)
        _same_output(got, want)
        if i > 0:
            assert ran == [], ran
    assert magpy.stats(compiled).hits == 2
