"""Never differs from eager: submodules, parameters and buffers read where modules store them.

A guard reads ``self.lin`` as ``self._modules['lin']`` (and parameters and buffers from
``_parameters`` / ``_buffers``) instead of running ``Module.__getattr__``; a tensor guard
checks many tensors in one call; module hooks registered for every module are checked once.
Each case changes, between calls, what would make those shortcuts differ from the attribute
read eager does: an instance ``__dict__`` entry that shadows the submodule, a class attribute
added later, a submodule or parameter replaced through the ordinary API, a buffer replaced by
one of another dtype or layout, a global module hook registered after the record was made.
"""

from __future__ import annotations

import _integration_differential as D
import torch
from torch import nn

case = D.case


def _x() -> torch.Tensor:
    return torch.randn(2, 4)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.register_buffer("scale", torch.full((3,), 2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale


@case("module_storage", inductor=True)
def submodule_replaced_through_setattr(w: D.World) -> object:
    torch.manual_seed(0)
    net = _Net()
    cf = w.compile(net)
    outs = [cf(_x()), cf(_x())]
    net.lin = nn.Linear(4, 3)  # Module.__setattr__: the new one goes to _modules
    outs += [cf(_x()), cf(_x())]
    return outs


@case("module_storage")
def instance_dict_shadows_submodule(w: D.World) -> object:
    torch.manual_seed(0)
    net = _Net()
    other = nn.Linear(4, 3)
    cf = w.compile(net)
    outs = [cf(_x()), cf(_x())]
    object.__setattr__(net, "lin", other)  # the instance __dict__ wins over __getattr__
    outs += [cf(_x()), cf(_x())]
    del net.__dict__["lin"]
    outs += [cf(_x()), cf(_x())]
    return outs


@case("module_storage")
def class_attribute_added_later(w: D.World) -> object:
    torch.manual_seed(0)

    class Net(_Net):
        pass

    net = Net()
    other = nn.Linear(4, 3)
    cf = w.compile(net)
    outs = [cf(_x()), cf(_x())]
    Net.lin = property(lambda self: other)  # type: ignore[attr-defined]
    outs += [cf(_x()), cf(_x())]
    del Net.lin  # type: ignore[attr-defined]
    outs += [cf(_x())]
    return outs


@case("module_storage")
def parameter_replaced(w: D.World) -> object:
    torch.manual_seed(0)
    net = _Net()
    cf = w.compile(net)
    outs = [cf(_x()), cf(_x())]
    net.lin.weight = nn.Parameter(torch.ones(3, 4))
    outs += [cf(_x()), cf(_x())]
    net.lin.bias = None  # type: ignore[assignment]
    outs += [cf(_x()), cf(_x())]
    return outs


@case("module_storage")
def buffer_replaced_with_other_dtype_and_strides(w: D.World) -> object:
    torch.manual_seed(0)
    net = _Net()
    cf = w.compile(net)
    outs = [cf(_x()), cf(_x())]
    net.scale = torch.full((3,), 3, dtype=torch.float64)
    outs += [cf(_x()), cf(_x())]
    net.scale = torch.full((3, 2), 0.5).t()[0]  # a non-contiguous view, offset 0
    outs += [cf(_x()), cf(_x())]
    net.scale = torch.arange(6.0)[3:]  # same sizes and strides, another storage offset
    outs += [cf(_x()), cf(_x())]
    return outs


@case("module_storage")
def parameter_requires_grad_flipped(w: D.World) -> object:
    torch.manual_seed(0)
    net = _Net()
    cf = w.compile(net)
    outs = [cf(_x()), cf(_x())]
    net.lin.weight.requires_grad_(False)
    outs += [cf(_x()), cf(_x())]
    return [(o, o.requires_grad) for o in outs]


@case("module_storage")
def global_forward_hook_registered_later(w: D.World) -> object:
    torch.manual_seed(0)
    net = _Net()
    seen: list[str] = []
    cf = w.compile(net)
    outs = [cf(_x()), cf(_x())]
    handle = nn.modules.module.register_module_forward_hook(
        lambda mod, args, out: seen.append(type(mod).__name__)
    )
    try:
        outs += [cf(_x()), cf(_x())]
    finally:
        handle.remove()
    outs += [cf(_x())]
    return outs, seen


@case("module_storage")
def instance_forward_pre_hook_on_a_submodule(w: D.World) -> object:
    torch.manual_seed(0)
    net = _Net()
    cf = w.compile(net)
    outs = [cf(_x()), cf(_x())]
    handle = net.lin.register_forward_pre_hook(lambda mod, args: (args[0] * 0,))
    outs += [cf(_x()), cf(_x())]
    handle.remove()
    outs += [cf(_x()), cf(_x())]
    return outs


@case("module_storage")
def submodule_deleted_and_set_to_none(w: D.World) -> object:
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b: nn.Module | None = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.a(x)
            return self.b(x) if self.b is not None else x

    net = Net()
    cf = w.compile(net)
    outs = [cf(_x()), cf(_x())]
    net.b = None
    outs += [cf(_x()), cf(_x())]
    return outs


@case("module_storage")
def many_blocks_one_replaced_deep_inside(w: D.World) -> object:
    torch.manual_seed(0)
    net = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(6)])
    cf = w.compile(net)
    outs = [cf(_x()), cf(_x())]
    net[4][0] = nn.Linear(4, 4)
    outs += [cf(_x()), cf(_x())]
    with torch.no_grad():
        net[2][0].weight.mul_(-1)  # in place: the same parameter, new values
    outs += [cf(_x()), cf(_x())]
    return outs


test_eager, test_inductor = D.tests(__name__)
