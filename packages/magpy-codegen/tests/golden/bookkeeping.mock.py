# Golden file: the mock generated for the 'bookkeeping' case of test_golden.py.
# Regenerate: python3 -m pytest -c pyproject.toml packages/magpy-codegen/tests --update-golden
# ruff: noqa
# fmt: off
# mock of bookkeeping
def __magpy_mock(fn, args, kwargs, inputs):
    v0 = args[0]
    v1 = v0.calls
    v3 = v0.history
    try:
        __magpy_outs = __magpy_graph(*inputs)
    except Exception as exc:
        __magpy_k2(exc, None, __magpy_reference, inputs)
    b2 = [__magpy_outs[0]]
    b4 = (b2, b2, v3,)
    __magpy_k1(v0, 'calls', __magpy_k0(v1, 1))
    __magpy_k1(v0, 'last', b2)
    return b4

# constants:
#   __magpy_k0 = <built-in function add>
#   __magpy_k1 = <function set_attribute>
#   __magpy_k2 = <function program_failed>
#   __magpy_graph = <bound method forward of GraphModule()>
#   __magpy_reference = None
