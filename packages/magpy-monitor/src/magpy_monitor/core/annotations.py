"""The annotation registry of the paper's section 5.2, as a declarative table.

Each callable the monitor meets is classified once, by identity first, then by rules over its
type and module. The properties follow the paper:

- ``AS_OP``: the call becomes one operator-graph node (torch functions, Tensor methods,
  ``torch.nn.functional``); ``inplace`` lists the argument positions it mutates.
- ``META``: a pure read of tensor metadata (``x.size()``, ``x.dim()``); with tensor metadata
  guarded, the result is a constant.
- ``PURE``: a pure closure over its inputs (no side effects, result determined by the inputs); it
  runs natively at record time and its result is a constant guarded by its inputs.
- ``VALUE_READ``: reads tensor *values* into Python (``.item()``, ``bool(t)``): dynamic.
- ``EFFECT``: observable side effects or hidden inputs (``print``, ``time.time``): dynamic.
- ``INLINE``: Python code the monitor follows into (user code, torch's Python helpers).
"""

from __future__ import annotations

import enum
import functools
import hashlib
import importlib
import random
import sys
import types
import weakref
from collections.abc import Callable
from typing import Any

import attrs
import torch

__all__ = [
    "TABLE",
    "Annotation",
    "AnnotationTable",
    "Kind",
    "classify",
    "hands_back_unchanged",
    "tensor_attr_kind",
]


class Kind(enum.Enum):
    AS_OP = "as_op"
    META = "meta"
    PURE = "pure"
    VALUE_READ = "value_read"
    EFFECT = "effect"
    INLINE = "inline"
    UNKNOWN = "unknown"


@attrs.frozen
class Annotation:
    """How a call to one callable is captured.

    ``method``: record as ``call_method`` with this name (Tensor methods), else ``call_function``.
    ``inplace``: argument positions the call mutates (in-place tensor ops, ``setitem``).
    ``returns_arg``: position of an argument the call returns as is (``x.add_(1)`` returns ``x``).
    ``effect``: the node stays in the graph even where nothing reads its result (a collective:
    the other ranks take part in it whether or not this one uses what it gives).
    """

    kind: Kind
    method: str | None = None
    inplace: tuple[int, ...] = ()
    returns_arg: int | None = None
    reason: str = ""
    effect: bool = False


_TENSOR_META_METHODS = frozenset(
    "size dim ndimension numel nelement element_size is_contiguous stride is_floating_point "
    "is_complex get_device storage_offset __len__ is_signed is_inference has_names "
    "is_set_to is_nonzero_shape __sizeof__ type_as_meta".split()
)
_TENSOR_VALUE_READ = frozenset(
    "item tolist __bool__ __int__ __float__ __index__ __complex__ numpy data_ptr __array__ "
    "__iter__ __contains__ __hash__ __reduce_ex__ __deepcopy__ __repr__ __str__ __format__ "
    "backward register_hook untyped_storage storage record_stream".split()
)
_TENSOR_META_ATTRS = frozenset(
    "shape dtype device ndim is_cuda is_cpu requires_grad layout is_sparse is_quantized is_leaf "
    "is_meta is_mkldnn is_nested names is_mps is_xpu itemsize nbytes".split()
)
_TENSOR_OP_ATTRS = frozenset("T mT H mH real imag data".split())
_INPLACE_DUNDERS = frozenset(
    "__iadd__ __isub__ __imul__ __itruediv__ __ifloordiv__ __imod__ __ipow__ __iand__ __ior__ "
    "__ixor__ __ilshift__ __irshift__ __imatmul__ __setitem__".split()
)
_TORCH_PURE_FUNCS = frozenset(
    "is_tensor is_storage is_floating_point is_complex numel get_default_dtype is_grad_enabled "
    "is_inference_mode_enabled is_autocast_enabled result_type promote_types can_cast "
    "is_nonzero_meta".split()
)
_TORCH_EFFECT_FUNCS = frozenset("manual_seed seed initial_seed set_printoptions save load".split())
_TORCH_FUNC_MODULES = frozenset(
    {
        "torch",
        "torch._C._nn",
        "torch._C._fft",
        "torch._C._linalg",
        "torch._C._special",
        "torch._C._VariableFunctions",
        "torch.nn.functional",
        "torch.functional",
    }
)


# operations that hand back their argument, unchanged, when it already has the asked-for dtype,
# device or layout
_SELF_WHEN_ALREADY_SO = frozenset(
    "long int float double half bfloat16 bool byte char short to type type_as contiguous cpu "
    "cuda as_tensor asarray".split()
)


def hands_back_unchanged(target: Any) -> bool:
    """Whether the operation ``target`` (an fx node's) may hand back its argument unchanged
    (``x.contiguous()`` of a contiguous ``x``): no in-place update."""
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    return name in _SELF_WHEN_ALREADY_SO


def tensor_attr_kind(name: str) -> Kind:
    """How reading attribute ``name`` of a tensor is captured."""
    if name in _TENSOR_META_ATTRS:
        return Kind.META
    if name in _TENSOR_OP_ATTRS:
        return Kind.AS_OP
    return Kind.UNKNOWN


@functools.cache
def writes_first_argument(name: str) -> bool | None:
    """Whether ATen operator ``name`` writes its first (tensor) argument in place, from its
    schemas' alias annotations (``Tensor(a!) self``); None when no schema says (a Python
    function, a name with no ATen operator, overloads that disagree)."""
    try:
        schemas = torch._C._jit_get_schemas_for_operator(f"aten::{name}")
    except RuntimeError:
        return None
    writes = {
        bool(first.alias_info is not None and first.alias_info.is_write)
        for first in (sch.arguments[0] for sch in schemas if sch.arguments)
        if _tensors(first.type) and not first.kwarg_only
    }
    return writes.pop() if len(writes) == 1 else None


@functools.cache
def written_arguments(name: str) -> tuple[int, ...]:
    """The positional arguments of ATen operator ``name`` it writes in place, tensors or lists
    of tensors (``torch._foreach_mul_(tensors, x)``, ``torch._amp_update_scale_(scale,
    growth_tracker, ...)`` writes both), where its schemas agree; () otherwise."""
    try:
        schemas = torch._C._jit_get_schemas_for_operator(f"aten::{name}")
    except RuntimeError:
        return ()
    found = {
        tuple(
            i
            for i, arg in enumerate(sch.arguments)
            if _tensors(arg.type)
            and arg.alias_info is not None
            and arg.alias_info.is_write
            and not arg.kwarg_only
        )
        for sch in schemas
    }
    return found.pop() if len(found) == 1 else ()


@functools.cache
def _first_is_list(name: str) -> bool:
    schemas = torch._C._jit_get_schemas_for_operator(f"aten::{name}")
    return bool(schemas and schemas[0].arguments) and isinstance(
        schemas[0].arguments[0].type, torch.ListType
    )


def _tensors(t: Any) -> bool:
    """A tensor, or a list of tensors (``_foreach_*``)."""
    if isinstance(t, torch.ListType):
        return isinstance(t.getElementType(), torch.TensorType)
    return isinstance(t, torch.TensorType)


def _inplace(name: str, by_name: bool) -> bool:
    """An operator that updates its first argument: as its schemas say, else by the naming
    convention (``add_``)."""
    writes = writes_first_argument(name)
    return by_name if writes is None else writes


def _tensor_method(name: str) -> Annotation:
    if name in _TENSOR_META_METHODS:
        return Annotation(Kind.META)
    if name in _TENSOR_VALUE_READ:
        return Annotation(Kind.VALUE_READ, reason=f"Tensor.{name} reads tensor values into Python")
    if name in _INPLACE_DUNDERS:
        return Annotation(Kind.AS_OP, method=name, inplace=(0,), returns_arg=None)
    if _inplace(name, name.endswith("_") and not name.endswith("__")):
        return Annotation(Kind.AS_OP, method=name, inplace=(0,), returns_arg=0)
    return Annotation(Kind.AS_OP, method=name)


def _torch_function(fn: Any, name: str) -> Annotation:
    if name in _TORCH_PURE_FUNCS:
        return Annotation(Kind.PURE)
    if name in _TORCH_EFFECT_FUNCS:
        return Annotation(Kind.EFFECT, reason=f"torch.{name} has effects outside the program")
    written = written_arguments(name)
    if written and _first_is_list(name):  # torch._foreach_add_(tensors, ...): each in place
        return Annotation(Kind.AS_OP, inplace=written, returns_arg=None)
    if _inplace(name, name.endswith("_") and not name.startswith("_")):
        others = tuple(i for i in written if i != 0)  # (_amp_update_scale_'s growth_tracker)
        return Annotation(Kind.AS_OP, inplace=(0, *others), returns_arg=0)
    if written:  # an operator writing arguments other than its first
        return Annotation(Kind.AS_OP, inplace=written, returns_arg=None)
    return Annotation(Kind.AS_OP)


_KEPT_MAX = 4096  # natives held by the memo (those that cannot be weakly referenced)


@attrs.define
class AnnotationTable:
    """Annotations by callable identity, then by rule; lookups are memoised by identity.

    The memo never keeps a callable alive: an entry holds a weak reference and goes when the
    callable does. Natives that cannot be weakly referenced (``Tensor.add``, a slot wrapper) and
    belong to a module or a type are held, at most ``_KEPT_MAX`` of them; one bound to an object
    (``x.__add__``) is not memoised, as holding it would hold the object.
    ``clear_memo()`` (``magpy.reset``) forgets every lookup.
    """

    _by_id: dict[int, tuple[Any, Annotation]] = attrs.field(factory=dict)
    _rules: list[Callable[[Any], Annotation | None]] = attrs.field(factory=list)
    _memo: dict[int, tuple[weakref.ref[Any], Annotation]] = attrs.field(factory=dict)
    _kept: dict[int, tuple[Any, Annotation]] = attrs.field(factory=dict)

    def register(self, fn: Any, annotation: Annotation) -> None:
        """Annotate ``fn`` (kept alive by the table)."""
        self._by_id[id(fn)] = (fn, annotation)
        self._memo.pop(id(fn), None)
        self._kept.pop(id(fn), None)

    def add_rule(self, rule: Callable[[Any], Annotation | None]) -> None:
        """Add a rule consulted (in order) for callables without an identity entry."""
        self._rules.append(rule)
        self.clear_memo()

    def clear_memo(self) -> None:
        """Forget every memoised lookup (registered annotations stay)."""
        self._memo.clear()
        self._kept.clear()

    def memo_size(self) -> int:
        """Callables whose lookup is memoised now."""
        return len(self._memo) + len(self._kept)

    def lookup(self, fn: Any) -> Annotation:
        """The annotation of ``fn`` (``Kind.UNKNOWN`` if nothing matches)."""
        key = id(fn)
        hit = self._by_id.get(key) or self._kept.get(key)
        if hit is not None and hit[0] is fn:
            return hit[1]
        weak = self._memo.get(key)
        if weak is not None and weak[0]() is fn:
            return weak[1]
        ann = Annotation(Kind.UNKNOWN)
        for rule in self._rules:
            found = rule(fn)
            if found is not None:
                ann = found
                break
        self._memoise(fn, ann)
        return ann

    def _memoise(self, fn: Any, ann: Annotation) -> None:
        key = id(fn)
        try:
            ref = weakref.ref(fn, functools.partial(_forget_memo, self._memo, key))
        except TypeError:
            owner = getattr(fn, "__self__", None)
            if owner is None or isinstance(owner, types.ModuleType | type):
                if len(self._kept) >= _KEPT_MAX:
                    self._kept.clear()
                self._kept[key] = (fn, ann)
            return
        self._memo[key] = (ref, ann)


def _forget_memo(
    memo: dict[int, tuple[weakref.ref[Any], Annotation]], key: int, ref: weakref.ref[Any]
) -> None:
    """A memoised callable died (a weakref callback: any thread, maybe during a collection)."""
    hit = memo.get(key)
    if hit is not None and hit[0] is ref:
        del memo[key]


def _effect_rule(fn: Any) -> Annotation | None:
    """Python's RNG and clocks: hidden state outside the program."""
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, random.Random):
        return Annotation(Kind.EFFECT, reason=f"random.{fn.__name__} draws from Python's RNG")
    module = getattr(fn, "__module__", None)
    if (
        module in ("time", "random", "os", "sys", "io", "builtins")
        and getattr(fn, "__name__", "") in _EFFECT_NAMES
    ):
        return Annotation(
            Kind.EFFECT, reason=f"{module}.{fn.__name__} has hidden inputs or effects"
        )
    return None


_EFFECT_NAMES = frozenset(
    "time perf_counter monotonic process_time time_ns perf_counter_ns sleep random randint "
    "uniform gauss choice shuffle sample getrandbits urandom input".split()
)


# torch's natives that change process-wide state a later call (or another part of the program)
# reads: threads, flags of the backends, precision, determinism. A graph holds math only, so a
# call to one is an effect that runs eagerly every time (a graph break), never a graph node
# that a backend may drop. (The autocast and grad-mode setters are modelled where torch's
# context managers use them.)
_GLOBAL_SETTERS = frozenset(
    "set_num_threads set_num_interop_threads set_flush_denormal set_anomaly_enabled "
    "_set_deterministic_algorithms _set_deterministic_fill_uninitialized_memory "
    "_set_float32_matmul_precision _set_fp32_precision_setter _set_onednn_allow_tf32 "
    "_set_math_sdp_allow_fp16_bf16_reduction _set_blas_preferred_backend "
    "_set_linalg_preferred_backend _set_rocm_fa_preferred_backend _set_qengine _set_warnAlways "
    "_set_cpu_allow_fp16_reduced_precision_reduction _set_nnpack_enabled _set_miopen_immediate "
    "_set_view_replay_enabled _set_grad_layout_enforcement_enabled "
    "_set_check_sparse_tensor_invariants _set_default_dtype _set_default_tensor_type "
    "set_default_dtype set_default_tensor_type _set_sm_carveout_experimental".split()
)
_GLOBAL_SETTER_PREFIXES = (
    "_set_cudnn_",
    "_set_mkldnn_",
    "_set_cublas_",
    "_set_sdp_",
    "_set_backcompat_",
)


def _global_setter_rule(fn: Any) -> Annotation | None:
    """A torch native that sets global state (``torch.set_num_threads``, the native setters
    behind ``torch.backends.*`` flags and ``torch.use_deterministic_algorithms``)."""
    if not isinstance(fn, types.BuiltinFunctionType):
        return None
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__name__", "")
    if module.split(".")[0] != "torch" or not (
        name in _GLOBAL_SETTERS or name.startswith(_GLOBAL_SETTER_PREFIXES)
    ):
        return None
    return Annotation(
        Kind.EFFECT, reason=f"{module}.{name} changes torch's global state (runs eagerly)"
    )


def _autograd_function_rule(fn: Any) -> Annotation | None:
    """``MyFn.apply(...)`` of a custom ``torch.autograd.Function``: one graph node."""
    owner = getattr(fn, "__self__", None)
    if (
        isinstance(owner, type)
        and issubclass(owner, torch.autograd.Function)
        and getattr(fn, "__name__", "") == "apply"
    ):
        return Annotation(Kind.AS_OP)
    return None


def _torch_rule(fn: Any) -> Annotation | None:
    objclass = getattr(fn, "__objclass__", None)
    if (
        objclass is not None
        and isinstance(objclass, type)
        and issubclass(objclass, torch._C.TensorBase)
    ):
        return _tensor_method(fn.__name__)
    if isinstance(fn, types.FunctionType):
        module = fn.__module__ or ""
        if module == "torch._tensor" and fn.__qualname__.startswith("Tensor."):
            return _tensor_method(fn.__name__)
        if module in ("torch.random", "torch.serialization"):
            return Annotation(
                Kind.EFFECT, reason=f"torch.{fn.__name__} has effects outside the program"
            )
        if module in ("torch.nn.functional", "torch.functional") and not fn.__name__.startswith(
            "_"
        ):
            return Annotation(Kind.AS_OP)
        return None
    if isinstance(fn, types.BuiltinFunctionType):
        module = getattr(fn, "__module__", None) or ""
        owner = getattr(fn, "__self__", None)
        if module in _TORCH_FUNC_MODULES or (
            isinstance(owner, type) and owner.__name__ == "_VariableFunctionsClass"
        ):
            return _torch_function(fn, fn.__name__)
        if isinstance(owner, torch.Tensor):
            return _tensor_method(fn.__name__)
    if isinstance(fn, torch._ops.OpOverloadPacket | torch._ops.OpOverload):
        return Annotation(Kind.AS_OP)
    return None


def _allowed_in_graph_rule(fn: Any) -> Annotation | None:
    """A function the program passed to ``torch.compiler.allow_in_graph``: one graph node, not
    followed (TorchDynamo's meaning; the call's inputs are guarded, the function by identity).
    TorchDynamo keeps the set; it is only looked at once the program imported it."""
    rules = sys.modules.get("torch._dynamo.trace_rules")
    if rules is None or not isinstance(fn, types.FunctionType):
        return None
    allowed = getattr(rules, "_allowed_callable_ids", None)
    if allowed is None or id(fn) not in allowed:
        return None
    return Annotation(Kind.AS_OP)


TABLE = AnnotationTable()
TABLE.add_rule(_allowed_in_graph_rule)
TABLE.add_rule(_effect_rule)
TABLE.add_rule(_global_setter_rule)
TABLE.add_rule(_autograd_function_rule)
TABLE.add_rule(_torch_rule)


def _register_mode_predicates() -> None:
    """``torch.jit.is_scripting()``, ``torch.compiler.is_compiling()`` and friends: they tell
    whether code runs under a tracer or compiler. Under MagPy the program runs eagerly, so each
    is a constant of the record (PURE with no inputs) instead of Python code to follow."""
    for module, names in (
        ("torch.jit", "is_scripting is_tracing"),
        ("torch._jit_internal", "is_scripting"),
        ("torch.compiler", "is_compiling is_dynamo_compiling is_exporting"),
        ("torch._utils", "is_compiling"),
        ("torch._C", "_get_tracing_state"),  # None unless torch.jit.trace runs (Tensor.__iter__)
        ("torch.fx._symbolic_trace", "is_fx_tracing"),
        ("torch.cuda", "is_current_stream_capturing"),
        ("torch.xpu", "is_current_stream_capturing"),
    ):
        try:
            mod = importlib.import_module(module)
        except ImportError:  # pragma: no cover - a torch without that module
            continue
        for name in names.split():
            fn = getattr(mod, name, None)
            if fn is not None:
                TABLE.register(fn, Annotation(Kind.PURE, reason=f"{module}.{name}"))


_register_mode_predicates()

# Native (or self-contained) standard-library functions that compute a value from their
# arguments alone. They run at record time; their inputs are guarded and their result is a
# constant of the record (TorchDynamo 2.13 breaks the graph on each of them).
_STDLIB_PURE = {
    "json": "loads dumps",
    "zlib": "crc32 adler32 compress decompress",
    "binascii": "crc32 crc_hqx hexlify unhexlify b2a_hex a2b_hex b2a_base64 a2b_base64",
    "base64": "b64encode b64decode urlsafe_b64encode urlsafe_b64decode b16encode b16decode",
    "struct": "pack unpack calcsize unpack_from iter_unpack",
    "hashlib": "md5 sha1 sha224 sha256 sha384 sha512 sha3_256 sha3_512 blake2b blake2s new",
    "string": "capwords",
    "textwrap": "dedent indent",
    "unicodedata": "normalize category name",
    # a callable's signature (diffusers' Attention.forward reads its processor's on every call);
    # the callable is guarded by identity (a bound method: its function, and its self's type)
    "inspect": "signature",
}


def _register_stdlib_pure() -> None:
    for module, names in _STDLIB_PURE.items():
        mod = importlib.import_module(module)
        for name in names.split():
            fn = getattr(mod, name, None)
            if fn is not None:
                TABLE.register(fn, Annotation(Kind.PURE, reason=f"{module}.{name}"))


def _hash_types() -> tuple[type, ...]:
    return tuple({type(hashlib.new(n)) for n in ("md5", "sha1", "sha256", "sha3_256", "blake2b")})


HASH_TYPES = _hash_types()  # hashlib objects: constants the mock must never hand out twice
_HASH_METHODS = frozenset("update digest hexdigest copy".split())


def _hash_method_rule(fn: Any) -> Annotation | None:
    """``h.update(b)``, ``h.hexdigest()`` of a hashlib object made during the run."""
    owner = getattr(fn, "__objclass__", None)  # HASH.hexdigest, as CALL sees it (self first)
    if owner is None:
        owner = type(getattr(fn, "__self__", None))
    if owner in HASH_TYPES and getattr(fn, "__name__", "") in _HASH_METHODS:
        return Annotation(Kind.PURE, reason=f"hashlib {fn.__name__}")
    return None


_register_stdlib_pure()
TABLE.add_rule(_hash_method_rule)


def classify(fn: Any) -> Annotation:
    """Annotation of ``fn`` in the global table."""
    return TABLE.lookup(fn)
