"""The tensor checks of a guard, many tensors in one C++ call.

A record of a model guards every parameter, buffer and input tensor: its class, dtype, device,
sizes, strides, ``requires_grad`` and the flags a program may read. Written as Python that is a
dozen attribute reads and calls per tensor, most of a hit's cost on a large model. torch's
``TensorGuards`` (``torch._C._dynamo.guards``, the check TorchDynamo's guards use; a C extension
type, importing it loads nothing of TorchDynamo) checks all of a record's static tensors in
one call: the Python class, the dispatch key set (which also tells inference tensors and the
conjugate and negative bits apart), dtype, device, ``requires_grad``, sizes and strides.

It is built from an example tensor per position; records keep no tensors of the recording
call (they would keep the inputs alive), so the example is made from the guarded metadata: an
empty tensor of that class, dtype, device and rank (sizes and strides are given separately).
What ``TensorGuards`` does not check, the storage offset, stays a Python comparison; tensors it
cannot stand for (other subclasses, names, sparse layouts, dynamic sizes) keep the Python check.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._C._dynamo.guards import TensorGuards

from ._generated import comment

__all__ = ["TensorBatch", "batchable", "example"]

# the classes an example can be made of exactly (the check compares the Python class)
_CLASSES = (torch.Tensor, torch.nn.Parameter)


def batchable(meta: tuple[Any, ...]) -> bool:
    cls, _dtype, device, shape, _stride, _requires_grad = meta[:6]
    if cls not in _CLASSES or None in shape or not isinstance(device, torch.device):
        return False
    if len(meta) < 7:
        return True
    _offset, _leaf, inference, conj, neg, layout, names = meta[6]
    return not (inference or conj or neg or names is not None) and layout is torch.strided


def example(meta: tuple[Any, ...]) -> torch.Tensor:
    """An empty tensor with the class, dtype, device, rank and ``requires_grad`` of ``meta``
    (what ``TensorGuards`` reads from its example besides sizes and strides)."""
    cls, dtype, device, shape, _stride, requires_grad = meta[:6]
    t = torch.empty((0,) * len(shape), dtype=dtype, device=device)
    if cls is torch.nn.Parameter:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad)


def _same_but_offset(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return a[:6] == b[:6] and len(a) == len(b) == 7 and a[6][1:] == b[6][1:]


class TensorBatch:
    """The static tensors of one guard, collected in order and checked in one call."""

    def __init__(self) -> None:
        self.vars: list[str] = []
        self.metas: list[tuple[Any, ...]] = []

    def add(self, v: str, meta: tuple[Any, ...]) -> bool:
        """Take the check of variable ``v`` (False: it cannot be batched; check it in Python)."""
        if not batchable(meta):
            return False
        if v in self.vars:  # checked again with its storage offset (the program read one)
            i = self.vars.index(v)
            if not _same_but_offset(self.metas[i], meta):
                return False
            if meta[6][0] is not None:
                self.metas[i] = meta
            return True
        self.vars.append(v)
        self.metas.append(meta)
        return True

    def lines(self, c: Any, indent: str) -> list[str]:
        """The guard's lines for the batch (none when nothing was added): what each tensor
        must be, as comments, then the C++ call and the storage offsets; ``c`` interns a
        constant of the guard."""
        if not self.vars:
            return []
        # (normal tensors even where the record is made under inference mode: the batch
        # holds no inference tensors, and the examples must have their dispatch keys)
        with torch.inference_mode(False), torch.no_grad():
            examples = [example(m) for m in self.metas]
        sizes: Any = [list(m[3]) for m in self.metas]
        strides: Any = [list(m[4]) for m in self.metas]
        guards = TensorGuards(*examples, dynamic_dims_sizes=sizes, dynamic_dims_strides=strides)
        check = guards.check
        out = [f"{indent}{comment(f'{v}: {_describe(m)}')}" for v, m in self._pairs()]
        out.append(f"{indent}if not {c(check)}({', '.join(self.vars)}): return None")
        offsets = [
            f"{v}.storage_offset() == {int(m[6][0])}"
            for v, m in self._pairs()
            if len(m) > 6 and m[6][0] is not None
        ]
        if offsets:
            out.append(f"{indent}if not ({' and '.join(offsets)}): return None")
        return out

    def _pairs(self) -> list[tuple[str, tuple[Any, ...]]]:
        return list(zip(self.vars, self.metas, strict=True))


def _describe(meta: tuple[Any, ...]) -> str:
    cls, dtype, device, shape, stride, requires_grad = meta[:6]
    return (
        f"{cls.__name__} {dtype} {list(shape)} stride {list(stride)} {device} "
        f"requires_grad={requires_grad}"
    )
