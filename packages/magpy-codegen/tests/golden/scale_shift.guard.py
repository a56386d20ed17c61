# Golden file: the guard generated for the 'scale_shift' case of test_golden.py.
# Regenerate: python3 -m pytest -c pyproject.toml packages/magpy-codegen/tests --update-golden
# ruff: noqa
# fmt: off
# guard of scale_shift
def __magpy_guard(fn, args, kwargs):
    try:
        if __magpy_k0() is not True: return None
        if not (fn is __magpy_k1): return None
        if not (type(args) is __magpy_k2): return None
        if not (type(kwargs) is __magpy_k3): return None
        if not (len(args) == 2): return None
        if not (tuple(map(type, (__magpy_k6 if issubclass(type(kwargs), __magpy_k5) else __magpy_k7)(kwargs))) == __magpy_k8 and tuple((__magpy_k6 if issubclass(type(kwargs), __magpy_k5) else __magpy_k7)(kwargs)) == __magpy_k4): return None
        if not ((fn.__code__ is __magpy_k10 or ((__magpy_outcome := __magpy_k9(fn)) is __magpy_outcome and __magpy_outcome is True))): return None
        v0 = kwargs['bias']
        if not (type(v0) is float and v0 == 0.5): return None
        v1 = args[1]
        if not (type(v1) is int and v1 == 2): return None
        v2 = args[0]
        # v2: Tensor torch.float32 [2, 3] stride [3, 1] cpu requires_grad=False
        if not __magpy_k11(v2): return None
        return (v2,)
    except Exception:
        return None

# constants:
#   __magpy_k0 = <built-in function is_grad_enabled>
#   __magpy_k1 = <function scale_shift>
#   __magpy_k2 = <class tuple>
#   __magpy_k3 = <class dict>
#   __magpy_k4 = ('bias',)
#   __magpy_k5 = <class OrderedDict>
#   __magpy_k6 = <method 'keys' of 'collections.OrderedDict' objects>
#   __magpy_k7 = <method 'keys' of 'dict' objects>
#   __magpy_k8 = (<class 'str'>,)
#   __magpy_k9 = code_of(scale_shift)
#   __magpy_k10 = <code scale_shift>
#   __magpy_k11 = <built-in method check of torch._C._dynamo.guards.TensorGuards object at 0x?>
