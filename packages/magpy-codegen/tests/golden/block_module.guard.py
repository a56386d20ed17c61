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
        v1 = __magpy_k6['F']
        if not (v1 is __magpy_k7): return None
        if not (type(fn) is __magpy_k8): return None
        if not (type(args) is __magpy_k9): return None
        if not (type(kwargs) is __magpy_k10): return None
        if not (len(args) == 1): return None
        if not (__magpy_k12(kwargs) == 0): return None
        v2 = __magpy_k8
        if not (not hasattr(v2, __magpy_k13)): return None
        if not ((not (fn._backward_hooks or fn._backward_pre_hooks) and 'forward' not in fn.__dict__) and (not (fn._forward_hooks or fn._forward_pre_hooks)) and ('lin' not in fn.__dict__)): return None
        if not ((v0.__code__ is __magpy_k15 or ((__magpy_outcome := __magpy_k14(v0)) is __magpy_outcome and __magpy_outcome is True))): return None
        v3 = __magpy_k16
        v4 = v3.forward
        if not (v4 is __magpy_k17): return None
        v5 = v1.linear
        if not (v5 is __magpy_k18): return None
        v6 = fn.k
        if not (type(v6) is int and v6 == 3): return None
        v7 = args[0]
        v8 = fn._modules
        v9 = v8['lin']
        if not ((type(v9) is __magpy_k16) and (not (v9._backward_hooks or v9._backward_pre_hooks) and 'forward' not in v9.__dict__) and (not (v9._forward_hooks or v9._forward_pre_hooks)) and ('weight' not in v9.__dict__) and ('bias' not in v9.__dict__)): return None
        v10 = v9._parameters
        v11 = v10['weight']
        v12 = v10['bias']
        # v7: Tensor torch.float32 [5, 4] stride [4, 1] cpu requires_grad=False
        # v11: Parameter torch.float32 [2, 4] stride [4, 1] cpu requires_grad=True
        # v12: Parameter torch.float32 [2] stride [1] cpu requires_grad=True
        if not __magpy_k19(v7, v11, v12): return None
        v13 = v2.forward
        if v0 is not v13: return None
        v14 = __magpy_k7
        if v1 is not v14: return None
        if len({id(v7), id(v11), id(v12)}) != 3: return None
        return (v7, v11, v12,)
    except Exception:
        return None

# constants:
#   __magpy_k0 = <built-in function is_grad_enabled>
#   __magpy_k1 = OrderedDict()
#   __magpy_k2 = OrderedDict()
#   __magpy_k3 = OrderedDict()
#   __magpy_k4 = OrderedDict()
#   __magpy_k5 = <function Block.forward>
#   __magpy_k6 = <module globals>
#   __magpy_k7 = <module torch.nn.functional>
#   __magpy_k8 = <class Block>
#   __magpy_k9 = <class tuple>
#   __magpy_k10 = <class dict>
#   __magpy_k12 = <slot wrapper '__len__' of 'dict' objects>
#   __magpy_k13 = 'lin'
#   __magpy_k14 = code_of(Block.forward)
#   __magpy_k15 = <code Block.forward>
#   __magpy_k16 = <class torch.nn.modules.linear.Linear>
#   __magpy_k17 = <function Linear.forward>
#   __magpy_k18 = <built-in function linear>
#   __magpy_k19 = <built-in method check of torch._C._dynamo.guards.TensorGuards object at 0x?>
