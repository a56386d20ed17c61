# Golden file: the guard generated for the 'block_module' case of test_golden.py.
# Regenerate: python3 -m pytest -c pyproject.toml packages/magpy-codegen/tests --update-golden
# ruff: noqa
# fmt: off
# guard of Block
def __magpy_guard(fn, args, kwargs):
    try:
        if __magpy_k0() is not True: return None
        if not (type(fn) is __magpy_k1): return None
        if not (type(args) is __magpy_k2): return None
        if not (type(kwargs) is __magpy_k3): return None
        if not (len(args) == 1): return None
        if not (tuple(kwargs) == __magpy_k4): return None
        if not (not (fn._backward_hooks or fn._backward_pre_hooks or __magpy_k5 or __magpy_k6 or __magpy_k7 or __magpy_k8) and 'forward' not in fn.__dict__): return None
        if not (not (fn._forward_hooks or fn._forward_pre_hooks)): return None
        v0 = fn.lin
        if not (type(v0) is __magpy_k9): return None
        v1 = fn.k
        if not (type(v1) is __magpy_k10 and v1 == 3): return None
        v2 = args[0]
        if not (type(v2) is __magpy_k11 and v2.dtype is __magpy_k12 and v2.shape == __magpy_k13 and v2.stride() == __magpy_k14 and v2.device == __magpy_k15 and v2.requires_grad is False): return None
        if not (not (v0._backward_hooks or v0._backward_pre_hooks or __magpy_k5 or __magpy_k6 or __magpy_k7 or __magpy_k8) and 'forward' not in v0.__dict__): return None
        if not (not (v0._forward_hooks or v0._forward_pre_hooks)): return None
        v3 = v0.weight
        if not (type(v3) is __magpy_k16 and v3.dtype is __magpy_k12 and v3.shape == __magpy_k17 and v3.stride() == __magpy_k18 and v3.device == __magpy_k19 and v3.requires_grad is True): return None
        v4 = v0.bias
        if not (type(v4) is __magpy_k16 and v4.dtype is __magpy_k12 and v4.shape == __magpy_k20 and v4.stride() == __magpy_k21 and v4.device == __magpy_k22 and v4.requires_grad is True): return None
        if len({id(v2), id(v3), id(v4)}) != 3: return None
        return (v2, v3, v4,)
    except Exception:
        return None

# constants:
#   __magpy_k0 = <built-in function is_grad_enabled>
#   __magpy_k1 = <class Block>
#   __magpy_k2 = <class tuple>
#   __magpy_k3 = <class dict>
#   __magpy_k4 = ()
#   __magpy_k5 = OrderedDict()
#   __magpy_k6 = OrderedDict()
#   __magpy_k7 = OrderedDict()
#   __magpy_k8 = OrderedDict()
#   __magpy_k9 = <class torch.nn.modules.linear.Linear>
#   __magpy_k10 = <class int>
#   __magpy_k11 = <class torch.Tensor>
#   __magpy_k12 = torch.float32
#   __magpy_k13 = (5, 4)
#   __magpy_k14 = (4, 1)
#   __magpy_k15 = device(type='cpu')
#   __magpy_k16 = <class torch.nn.parameter.Parameter>
#   __magpy_k17 = (2, 4)
#   __magpy_k18 = (4, 1)
#   __magpy_k19 = device(type='cpu')
#   __magpy_k20 = (2,)
#   __magpy_k21 = (1,)
#   __magpy_k22 = device(type='cpu')
