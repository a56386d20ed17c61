"""Modules with backward hooks called with gradients off (issue 19): the hooks cannot run
(``_call_impl`` sets them up on tensors that need no grad), so the call is one graph, served
whatever hooks are added or removed later, while the same module with gradients on still sees
its hooks fire as in eager: there its call is a break that says why (the hooks are tied to the
call's own autograd nodes, which a compiled graph replaces), full and non-full hooks alike.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

import magpy


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def _pair() -> tuple[_Net, _Net]:
    torch.manual_seed(0)
    model, twin = _Net(), _Net()
    twin.load_state_dict(model.state_dict())
    return model, twin


def test_full_backward_hook_under_no_grad_is_one_graph() -> None:
    model, twin = _pair()
    fired: list[str] = []
    for m, tag in ((model, "compiled"), (twin, "eager")):
        m.a.register_full_backward_hook(lambda mod, gi, go, tag=tag: fired.append(tag))
    compiled = magpy.compile(model, backend="eager")
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(3, 4)
            torch.testing.assert_close(compiled(x), twin(x))
    stats = magpy.stats(compiled)
    assert stats.graphs == 1 and stats.breaks == 0 and stats.hits == 3, stats
    assert fired == []


def test_hooks_added_and_removed_later_under_no_grad() -> None:
    """With gradients off, a module that gains its first backward hooks costs one record (its
    guard then stops checking them): hooks registered later (full, non-full, pre) on a module
    that has some, or removed, still hit; every call equals eager."""
    model, twin = _pair()
    compiled = magpy.compile(model, backend="eager")
    handles: list[Any] = []
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (register_backward_hook is deprecated)
        for step in range(6):
            if step == 1:
                handles.append(model.b.register_full_backward_hook(lambda m, gi, go: None))
            if step == 2:
                handles.append(model.a.register_backward_hook(lambda m, gi, go: None))
            if step == 3:
                handles.append(model.a.register_full_backward_pre_hook(lambda m, go: None))
                handles.append(model.b.register_full_backward_hook(lambda m, gi, go: None))
            if step == 5:
                for h in handles:
                    h.remove()
            x = torch.randn(3, 4)
            torch.testing.assert_close(compiled(x), twin(x))
    stats = magpy.stats(compiled)
    assert stats.breaks == 0 and stats.records == 3 and stats.hits == 3, stats


def test_with_grad_the_hooks_still_fire_as_in_eager() -> None:
    """The same compiled module with gradients on: its backward hook fires in backward with
    the gradients eager gives it (a break: MagPy runs that call natively)."""
    model, twin = _pair()
    seen: dict[str, list[torch.Tensor]] = {"compiled": [], "eager": []}
    for m, tag in ((model, "compiled"), (twin, "eager")):
        m.a.register_full_backward_hook(
            lambda mod, gi, go, tag=tag: seen[tag].append(go[0].detach().clone())
        )
    compiled = magpy.compile(model, backend="eager")
    with torch.no_grad():
        compiled(torch.randn(3, 4))
    for _ in range(2):
        x = torch.randn(3, 4, requires_grad=True)
        compiled(x).sum().backward()
        twin(x).sum().backward()
    assert len(seen["compiled"]) == len(seen["eager"]) == 2
    for got, want in zip(seen["compiled"], seen["eager"], strict=True):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(model.a.weight.grad, twin.a.weight.grad)


class _DictOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"y": self.lin(x)}


def test_a_result_the_hooks_read_runs_as_in_eager() -> None:
    """A module with a full backward hook returning a dict: eager warns on every call (the
    hook cannot attach); MagPy runs that call natively, so the warnings are eager's."""
    torch.manual_seed(0)
    inner = _DictOut()
    inner.register_full_backward_hook(lambda m, gi, go: None)
    outer = nn.Sequential(inner)
    compiled = magpy.compile(outer, backend="eager")
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 4)
            with warnings.catch_warnings(record=True) as got:
                warnings.simplefilter("always")
                out = compiled(x)
            with warnings.catch_warnings(record=True) as want:
                warnings.simplefilter("always")
                ref = outer(x)
            torch.testing.assert_close(out["y"], ref["y"])
            # (MagPy's own warning that Sequential runs eagerly comes once, on the first call)
            torch_warnings = [w for w in got if not issubclass(w.category, magpy.MagPyWarning)]
            assert [
                str(w.message) for w in torch_warnings if "backward hooks" in str(w.message)
            ] == [str(w.message) for w in want if "backward hooks" in str(w.message)]


class _ScalesGrad(nn.Module):
    """yolor's ``DeformConv2d``: a Conv2d with a non-full backward hook (registered with
    ``register_backward_hook``: it hooks the grad_fn of the result's last operation and may
    replace its gradients)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.calls = 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.conv.register_backward_hook(self._scale)

    def _scale(self, mod: nn.Module, gi: tuple[Any, ...], go: tuple[Any, ...]) -> Any:
        self.calls += 1
        return tuple(None if g is None else g * 0.5 for g in gi)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).relu() * 2


def test_a_non_full_backward_hook_with_grad_is_a_break_and_fires_as_in_eager() -> None:
    """With gradients on, the hooked Conv2d call stays a break that says why (its hook is tied
    to the call's own autograd nodes), and runs natively: the hook fires and scales the
    gradients as in eager; the rest of forward is graphed around it."""
    torch.manual_seed(0)
    model, twin = _ScalesGrad(), _ScalesGrad()
    twin.load_state_dict(model.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's FutureWarning about non-full hooks)
        explained = magpy.explain(model)(torch.randn(1, 2, 4, 4))
    reasons = [r.reason for r in explained.break_reasons]
    assert reasons == [
        "Conv2d has backward hooks (with gradients on they hook this call's own autograd nodes)"
    ]
    model.calls = 0
    compiled = magpy.compile(model, backend="eager")
    for _ in range(3):
        x = torch.randn(1, 2, 4, 4, requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled(x).sum().backward()
            twin(x2).sum().backward()
        torch.testing.assert_close(x.grad, x2.grad)
    assert model.calls == twin.calls == 3
    torch.testing.assert_close(model.conv.weight.grad, twin.conv.weight.grad)
