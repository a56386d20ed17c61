# Golden file: the guard generated for the 'block_module' case of test_golden.py.
# Regenerate: python3 -m pytest -c pyproject.toml packages/magpy-codegen/tests --update-golden
# ruff: noqa
# fmt: off
# guard of Block
def __magpy_guard(fn, args, kwargs):
    try:
        if __magpy_k0() is not True: return None
        if not (not (__magpy_k1 or __magpy_k2 or __magpy_k3 or __magpy_k4)): return None
        v0 = __magpy_k5
        if not (v0 is __magpy_k5): return None
        if not (type(fn) is __magpy_k6): return None
        if not (type(args) is __magpy_k7): return None
        if not (type(kwargs) is __magpy_k8): return None
        if not (len(args) == 1): return None
        if not (__magpy_k10(kwargs) == 0): return None
        v1 = __magpy_k6
        if not (not hasattr(v1, __magpy_k11)): return None
        if not ((not (fn._backward_hooks or fn._backward_pre_hooks) and 'forward' not in fn.__dict__) and (not (fn._forward_hooks or fn._forward_pre_hooks)) and ('lin' not in fn.__dict__)): return None
        if not ((v0.__code__ is __magpy_k13 or __magpy_k12(v0) is True)): return None
        v2 = __magpy_k14
        v3 = v2.linear
        if not (v3 is __magpy_k15): return None
        v4 = fn.k
        if not (type(v4) is int and v4 == 3): return None
        v5 = args[0]
        v6 = fn._modules
        v7 = v6['lin']
        if not ((type(v7) is __magpy_k16) and (not (v7._backward_hooks or v7._backward_pre_hooks) and 'forward' not in v7.__dict__) and (not (v7._forward_hooks or v7._forward_pre_hooks)) and ('weight' not in v7.__dict__) and ('bias' not in v7.__dict__)): return None
        v8 = v7._parameters
        v9 = v8['weight']
        v10 = v8['bias']
        # v5: Tensor torch.float32 [5, 4] stride [4, 1] cpu requires_grad=False
        # v9: Parameter torch.float32 [2, 4] stride [4, 1] cpu requires_grad=True
        # v10: Parameter torch.float32 [2] stride [1] cpu requires_grad=True
        if not __magpy_k17(v5, v9, v10): return None
        v11 = v1.forward
        if v0 is not v11: return None
        if len({id(v5), id(v9), id(v10)}) != 3: return None
        return (v5, v9, v10,)
    except Exception:
        return None

# constants:
#   __magpy_k0 = <built-in function is_grad_enabled>
#   __magpy_k1 = OrderedDict()
#   __magpy_k2 = OrderedDict()
#   __magpy_k3 = OrderedDict()
#   __magpy_k4 = OrderedDict()
#   __magpy_k5 = <function Block.forward>
#   __magpy_k6 = <class Block>
#   __magpy_k7 = <class tuple>
#   __magpy_k8 = <class dict>
#   __magpy_k10 = <slot wrapper '__len__' of 'dict' objects>
#   __magpy_k11 = 'lin'
#   __magpy_k12 = code_of(Block.forward)
#   __magpy_k13 = <code Block.forward>
#   __magpy_k14 = <module torch.nn.functional>
#   __magpy_k15 = <built-in function linear>
#   __magpy_k16 = <class torch.nn.modules.linear.Linear>
#   __magpy_k17 = <built-in method check of torch._C._dynamo.guards.TensorGuards object at 0x?>
