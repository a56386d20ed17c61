# Golden file: the mock generated for the 'block_module' case of test_golden.py.
# Regenerate: python3 -m pytest -c pyproject.toml packages/magpy-codegen/tests --update-golden
# ruff: noqa
# fmt: off
# mock of Block
def __magpy_mock(fn, args, kwargs, inputs):
    try:
        __magpy_outs = __magpy_graph(*inputs)
    except Exception as exc:
        __magpy_k0(exc, None, __magpy_reference, inputs)
    return __magpy_outs[0]

# constants:
#   __magpy_k0 = <function program_failed>
#   __magpy_graph = <bound method forward of GraphModule()>
#   __magpy_reference = None
