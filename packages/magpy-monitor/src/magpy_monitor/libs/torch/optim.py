"""``torch.optim`` as the monitor follows it: the wrappers torch puts around an optimizer's
methods, and the queries its code makes about how it runs.

An optimizer's ``step`` and ``zero_grad`` are plain Python over tensors, followed like any
function, so their updates land in the training step's graph. Around them torch has:

- ``torch._disable_dynamo`` (``zero_grad``, ``_optimizer_step_code``, the optimizers' functional
  forms): a wrapper that calls the function with TorchDynamo's frame callback off. It changes
  nothing the program computes, so the call is followed *through* it: the wrapper's frames run
  natively and untraced, and the wrapped function's frame is followed as the call's
  (``_through``). (``torch.compiler.disable`` on a user's function is not this: it asks that the
  function not be compiled.)
- ``torch._dynamo.graph_break()`` in torch's own code (``_use_grad_for_differentiable``): a hint
  for TorchDynamo's graphs; here it does nothing. A user's own call is a graph break.
- ``torch.compiler.is_compiling()``: True while MagPy records (``globalstate.set_compiling``),
  as under torch.compile, so an optimizer takes its compile-friendly path (its step count as a
  tensor, not read with ``.item()``), a pure call here.
- Questions with a fixed answer in a process: ``torch.jit.is_scripting()``, the private-use
  backend's name, the current accelerator, whether CUDA is built and available: pure calls,
  constants of the record.
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.compiler
from torch._compile import _disable_dynamo

from magpy_refgraph import Cell

from ...bytecode.iteration import unpack
from ...core.dispatch import Call, call_rule
from ...core.frame import FrameMonitor, Inst
from ...core.registry import register_builtin
from ...core.values import Val
from ...pyobj.builtins import _pure
from ...pyobj.instances import follow

__all__: list[str] = []


def _nothing() -> None:
    return None


def _wrapper_code() -> types.CodeType:
    inner: Any = _disable_dynamo(_nothing)
    code: types.CodeType = inner.__code__
    return code


_DISABLE_INNER = _wrapper_code()


def _is_disable_wrapper(c: Call) -> bool:
    """``torch._disable_dynamo(fn)``'s wrapper, or the one ``torch._dynamo.disable`` puts
    around a function of torch's own (TorchDynamo, once imported, wraps some of
    ``torch.optim``'s): a function the program wrapped with ``torch.compiler.disable`` is
    not followed through."""
    fn = c.fn
    if type(fn) is not types.FunctionType or fn.__closure__ is None:
        return False
    code = fn.__code__
    if "fn" not in code.co_freevars:
        return False
    if code is _DISABLE_INNER:
        return True
    if code.co_qualname != "DisableContext.__call__.<locals>._fn":
        return False
    wrapped = fn.__closure__[code.co_freevars.index("fn")].cell_contents
    module = getattr(wrapped, "__module__", None) or ""
    return code.co_filename.endswith(_EVAL_FRAME) and module.split(".")[0] == "torch"


_EVAL_FRAME = "/torch/_dynamo/eval_frame.py"


@call_rule("torch-disabled wrapper", _is_disable_wrapper)
def _through(m: FrameMonitor, inst: Inst, c: Call) -> None:
    """``wrapper(*args)`` of ``torch._disable_dynamo(fn)``: followed as ``fn(*args)``."""
    cap = m.cap
    wrapper = c.fn
    cap.observe_identity(c.fn_val)
    index = wrapper.__code__.co_freevars.index("fn")
    wrapped = wrapper.__closure__[index].cell_contents
    fn_val = cap.root(Cell("fn", wrapper), wrapped)
    cap.observe_identity(fn_val)
    if type(wrapped) is not types.FunctionType:
        raise m.unsupported(f"torch._disable_dynamo around a {type(wrapped).__name__}")
    follow(m, inst, wrapped, c.pos, 1, kwargs=c.kwargs)  # (the wrapper's frames: untraced)


def _torch_internal(m: FrameMonitor) -> bool:
    return _module_of(m).split(".")[0] == "torch"


def _is_graph_break(fn: Any) -> bool:
    """``torch._dynamo.graph_break`` (known by name: importing TorchDynamo takes seconds)."""
    return (
        type(fn) is types.FunctionType
        and fn.__module__ == "torch._dynamo.decorators"
        and fn.__qualname__ == "graph_break"
    )


@call_rule("torch graph_break hint", lambda c: _is_graph_break(c.fn))
def _graph_break(m: FrameMonitor, inst: Inst, c: Call) -> None:
    if not _torch_internal(m) or c.pos or c.kwargs:
        raise m.unsupported("torch._dynamo.graph_break()")
    m.expect_outputs(inst, 1, lambda real: [m.cap.const(None)])


def _module_of(m: FrameMonitor) -> str:
    module = m.frame.f_globals.get("__name__", "")
    return module if isinstance(module, str) else ""


register_builtin(
    torch.compiler.is_compiling,
    torch.compiler.is_dynamo_compiling,
    torch.compiler.is_exporting,
    torch._jit_internal.is_scripting,
    torch.jit._trace.is_tracing,
    torch._C._get_privateuse1_backend_name,
    torch.backends.cuda.is_built,
    torch.cuda.is_available,
    torch.cuda.device_count,
    torch.accelerator.current_accelerator,
    torch.accelerator.is_available,
    torch._utils.is_compiling,
)(_pure)


@register_builtin(torch._C._group_tensors_by_device_and_dtype)
def _group_by_device_and_dtype(
    m: FrameMonitor, inst: Inst, pos: list[Val], kw: dict[str, Val]
) -> None:
    """``torch._C._group_tensors_by_device_and_dtype(tensorlistlist, with_indices)`` (the
    optimizers' and ``clip_grad_norm_``'s grouping): the same tensors regrouped by their
    device and dtype, which are guarded."""
    cap = m.cap
    args = [*pos, *kw.values()]
    lists = unpack(m, args[0], None) if args else []
    known: dict[int, Val] = {}
    for lst in lists:
        for v in unpack(m, lst, None):
            if isinstance(v.obj, torch.Tensor):
                cap.guard_meta(v, sizes=False)
                known[id(v.obj)] = v
            elif v.obj is not None:
                raise m.unsupported("grouping tensors: an item that is no tensor")
    for v in args[1:]:
        cap.observe(v)

    def shadow(x: Any) -> Val:
        if isinstance(x, torch.Tensor):
            if id(x) not in known:
                raise m.unsupported("grouping tensors gave a tensor it was not given")
            return known[id(x)]
        if type(x) in (list, tuple):
            return cap.new(x, items=[shadow(y) for y in x])
        return cap.const(x)  # (None, an index, a (device, dtype) key)

    def make(real: list[Any]) -> list[Val]:
        groups = {key: (cap.const(key), shadow(value)) for key, value in real[0].items()}
        return [cap.new(real[0], items=groups)]

    m.expect_outputs(inst, 1, make)
