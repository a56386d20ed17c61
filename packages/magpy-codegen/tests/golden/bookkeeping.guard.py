# Golden file: the guard generated for the 'bookkeeping' case of test_golden.py.
# Regenerate: python3 -m pytest -c pyproject.toml packages/magpy-codegen/tests --update-golden
# ruff: noqa
# fmt: off
# guard of bookkeeping
def __magpy_guard(fn, args, kwargs):
    try:
        if __magpy_k0() is not True: return None
        if not (fn is __magpy_k1): return None
        if not (type(args) is __magpy_k2): return None
        if not (type(kwargs) is __magpy_k3): return None
        if not (len(args) == 2): return None
        if not (__magpy_k5(kwargs) == 0): return None
        if not ((fn.__code__ is __magpy_k7 or ((__magpy_outcome := __magpy_k6(fn)) is __magpy_outcome and __magpy_outcome is True))): return None
        v0 = args[0]
        if not (type(v0) is __magpy_k8): return None
        v1 = args[1]
        v2 = v0.calls
        if not (type(v2) is __magpy_k9): return None
        # v1: Tensor torch.float32 [3] stride [1] cpu requires_grad=False
        if not __magpy_k10(v1): return None
        return (v1,)
    except Exception:
        return None

# constants:
#   __magpy_k0 = <built-in function is_grad_enabled>
#   __magpy_k1 = <function bookkeeping>
#   __magpy_k2 = <class tuple>
#   __magpy_k3 = <class dict>
#   __magpy_k5 = <slot wrapper '__len__' of 'dict' objects>
#   __magpy_k6 = code_of(bookkeeping)
#   __magpy_k7 = <code bookkeeping>
#   __magpy_k8 = <class History>
#   __magpy_k9 = <class int>
#   __magpy_k10 = <built-in method check of torch._C._dynamo.guards.TensorGuards object at 0x?>
