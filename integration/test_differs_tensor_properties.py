"""Never differs from eager: tensor properties the program reads are guarded (issue 17, class 2).

A record made for a tensor serves only tensors with the same value of every property the
program may read as a constant: class, dtype, device, shape, strides, ``requires_grad``, and
also ``storage_offset()``, ``is_inference()``, the conjugate and negative bits,
layout and ``names``.
"""

from __future__ import annotations

import _integration_differential as D
import torch

case = D.case


def _calls(w: D.World, f, inputs):  # type: ignore[no-untyped-def]
    cf = w.compile(f)
    return [w.attempt(lambda x=x: cf(x)) for x in inputs]


@case("tensor_properties", inductor=True)
def storage_offset_read(w: D.World) -> object:
    def f(x):
        return x * 2, x.storage_offset()

    base = torch.arange(6.0)
    return _calls(w, f, [base[0:3], base[0:3], base[1:4], base[3:6], base[0:3]])


@case("tensor_properties")
def storage_offset_branch(w: D.World) -> object:
    def f(x):
        if x.storage_offset() > 0:
            return x + 1
        return x - 1

    base = torch.arange(8.0)
    return _calls(w, f, [base[:4], base[:4], base[4:], base[:4]])


@case("tensor_properties")
def storage_offset_as_strided(w: D.World) -> object:
    def f(x):
        return x.as_strided((2,), (1,)) * 1

    base = torch.arange(8.0)
    return _calls(w, f, [base[:4], base[:4], base[2:6], base[:4]])


@case("tensor_properties", inductor=True)
def storage_offset_not_read(w: D.World) -> object:
    """No operator depends on where its input starts: views at other offsets hit the record
    (only three calls: a guarded offset would give none)."""

    def f(x):
        return (x * 2 + 1).sum(0), x.as_strided((2,), (1,)) * 3, x[1:] - x[:-1]

    base = torch.arange(24.0)
    return _calls(w, f, [base[0:16].view(4, 4), base[1:17].view(4, 4), base[5:21].view(4, 4)])


@case("tensor_properties", inductor=True)
def is_inference_read(w: D.World) -> object:
    def f(x):
        return x.is_inference(), x + 1

    a = torch.ones(3)
    with torch.inference_mode():
        b = torch.ones(3)
    return _calls(w, f, [a, a, b, a, b])


@case("tensor_properties")
def is_inference_branch(w: D.World) -> object:
    def f(x):
        return x * (3 if x.is_inference() else 5)

    a = torch.ones(3)
    with torch.inference_mode():
        b = torch.ones(3)
    return _calls(w, f, [a, a, b, a])


@case("tensor_properties")
def is_conj_read(w: D.World) -> object:
    def f(x):
        return x.is_conj(), x * 2

    a = torch.tensor([1 + 2j, 3 - 1j])
    return _calls(w, f, [a, a, a.conj(), a, a.conj().resolve_conj()])


@case("tensor_properties")
def is_neg_read(w: D.World) -> object:
    def f(x):
        return x.is_neg(), x + 1

    a = torch.tensor([1.0, -2.0])
    return _calls(w, f, [a, a, a._neg_view(), a])


@case("tensor_properties")
def layout_read(w: D.World) -> object:
    def f(x):
        return str(x.layout), x.is_sparse

    a = torch.eye(2)
    return _calls(w, f, [a, a, a.to_sparse(), a])


@case("tensor_properties")
def requires_grad_read(w: D.World) -> object:
    def f(x):
        return x.requires_grad, x.detach() * 3

    return _calls(w, f, [torch.ones(2), torch.ones(2), torch.ones(2, requires_grad=True)])


@case("tensor_properties")
def contiguous_memory_format(w: D.World) -> object:
    def f(x):
        return x.is_contiguous(memory_format=torch.channels_last), x.is_contiguous(), x + 1

    a = torch.ones(1, 3, 2, 2)
    b = a.to(memory_format=torch.channels_last)
    return _calls(w, f, [a, a, b, a, b])


@case("tensor_properties")
def transposed_stride(w: D.World) -> object:
    def f(x):
        return x.stride(), x.is_contiguous(), x * 1

    a = torch.ones(3, 3)
    return _calls(w, f, [a, a, a.t(), a, a.t().contiguous()])


@case("tensor_properties")
def dim_and_numel(w: D.World) -> object:
    def f(x):
        return x.dim(), x.numel(), x.sum()

    return _calls(w, f, [torch.ones(4), torch.ones(4), torch.ones(2, 2), torch.ones(4)])


@case("tensor_properties")
def element_size_dtype(w: D.World) -> object:
    def f(x):
        return x.element_size(), x.is_floating_point(), x.itemsize

    return _calls(
        w, f, [torch.ones(2), torch.ones(2), torch.ones(2, dtype=torch.float16), torch.ones(2)]
    )


@case("tensor_properties")
def version_read(w: D.World) -> object:
    def f(x):
        return x._version, x + 1

    a = torch.ones(2)
    cf = w.compile(f)
    out = [cf(a), cf(a)]
    a.add_(1)
    out += [cf(a), cf(a)]
    return out


@case("tensor_properties")
def data_ptr_equality(w: D.World) -> object:
    def f(x, y):
        return x.data_ptr() == y.data_ptr(), x + y

    cf = w.compile(f)
    a, b = torch.ones(2), torch.ones(2)
    return [cf(a, a), cf(a, a), cf(a, b), cf(a, a)]


@case("tensor_properties")
def parameter_vs_tensor(w: D.World) -> object:
    def f(x):
        return type(x).__name__, x.detach() * 2

    p = torch.nn.Parameter(torch.ones(2))
    return _calls(w, f, [torch.ones(2), torch.ones(2), p, torch.ones(2)])


@case("tensor_properties")
def grad_attribute(w: D.World) -> object:
    def f(x):
        return x.grad is None, x.detach() + 1

    a = torch.ones(2, requires_grad=True)
    cf = w.compile(f)
    out = [cf(a), cf(a)]
    a.sum().backward()
    out += [cf(a), cf(a)]
    return out


test_eager, test_inductor = D.tests(__name__)
