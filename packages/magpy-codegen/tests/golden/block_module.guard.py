# Golden file: the guard generated for the 'block_module' case of test_golden.py.
# Regenerate: python3 -m pytest -c pyproject.toml packages/magpy-codegen/tests --update-golden
# ruff: noqa
# fmt: off
# guard of Block
def __magpy_guard(fn, args, kwargs):
    try:
        if __magpy_k0() is not True: return None
        v0 = __magpy_k1
        if not (v0 is __magpy_k1): return None
        if not (type(fn) is __magpy_k2): return None
        if not (type(args) is __magpy_k3): return None
        if not (type(kwargs) is __magpy_k4): return None
        if not (len(args) == 1): return None
        if not (tuple(map(__magpy_k6, __magpy_k7(kwargs))) == __magpy_k5): return None
        if not (not (fn._backward_hooks or fn._backward_pre_hooks or __magpy_k8 or __magpy_k9 or __magpy_k10 or __magpy_k11) and 'forward' not in fn.__dict__): return None
        if not (not (fn._forward_hooks or fn._forward_pre_hooks)): return None
        if not (__magpy_k12(v0) is True): return None
        v1 = __magpy_k13
        v2 = v1.linear
        if not (v2 is __magpy_k14): return None
        v3 = fn.lin
        if not (type(v3) is __magpy_k15): return None
        v4 = fn.k
        if not (type(v4) is int and v4 == 3): return None
        v5 = args[0]
        if not (type(v5) is __magpy_k16 and v5.dtype is __magpy_k17 and v5.shape == __magpy_k18 and v5.stride() == __magpy_k19 and v5.device == __magpy_k20 and v5.requires_grad is False and v5.is_inference() is False and v5.is_conj() is False and v5.is_neg() is False and v5.layout is __magpy_k21 and v5.storage_offset() == 0): return None
        if not (not (v3._backward_hooks or v3._backward_pre_hooks or __magpy_k8 or __magpy_k9 or __magpy_k10 or __magpy_k11) and 'forward' not in v3.__dict__): return None
        if not (not (v3._forward_hooks or v3._forward_pre_hooks)): return None
        v6 = v3.weight
        if not (type(v6) is __magpy_k22 and v6.dtype is __magpy_k17 and v6.shape == __magpy_k23 and v6.stride() == __magpy_k24 and v6.device == __magpy_k25 and v6.requires_grad is True and v6.is_inference() is False and v6.is_conj() is False and v6.is_neg() is False and v6.layout is __magpy_k21 and v6.storage_offset() == 0): return None
        v7 = v3.bias
        if not (type(v7) is __magpy_k22 and v7.dtype is __magpy_k17 and v7.shape == __magpy_k26 and v7.stride() == __magpy_k27 and v7.device == __magpy_k28 and v7.requires_grad is True and v7.is_inference() is False and v7.is_conj() is False and v7.is_neg() is False and v7.layout is __magpy_k21 and v7.storage_offset() == 0): return None
        v8 = __magpy_k2
        v9 = v8.forward
        if v0 is not v9: return None
        if len({id(v5), id(v6), id(v7)}) != 3: return None
        return (v5, v6, v7,)
    except Exception:
        return None

# constants:
#   __magpy_k0 = <built-in function is_grad_enabled>
#   __magpy_k1 = <function Block.forward>
#   __magpy_k2 = <class Block>
#   __magpy_k3 = <class tuple>
#   __magpy_k4 = <class dict>
#   __magpy_k5 = ()
#   __magpy_k6 = <function exact_token>
#   __magpy_k7 = <method 'keys' of 'dict' objects>
#   __magpy_k8 = OrderedDict()
#   __magpy_k9 = OrderedDict()
#   __magpy_k10 = OrderedDict()
#   __magpy_k11 = OrderedDict()
#   __magpy_k12 = code_of(Block.forward)
#   __magpy_k13 = <module torch.nn.functional>
#   __magpy_k14 = <built-in function linear>
#   __magpy_k15 = <class torch.nn.modules.linear.Linear>
#   __magpy_k16 = <class torch.Tensor>
#   __magpy_k17 = torch.float32
#   __magpy_k18 = (5, 4)
#   __magpy_k19 = (4, 1)
#   __magpy_k20 = device(type='cpu')
#   __magpy_k21 = torch.strided
#   __magpy_k22 = <class torch.nn.parameter.Parameter>
#   __magpy_k23 = (2, 4)
#   __magpy_k24 = (4, 1)
#   __magpy_k25 = device(type='cpu')
#   __magpy_k26 = (2,)
#   __magpy_k27 = (1,)
#   __magpy_k28 = device(type='cpu')
