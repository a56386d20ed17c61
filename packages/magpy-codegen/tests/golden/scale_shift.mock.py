# Golden file: the mock generated for the 'scale_shift' case of test_golden.py.
# Regenerate: python3 -m pytest -c pyproject.toml packages/magpy-codegen/tests --update-golden
# ruff: noqa
# fmt: off
# mock of scale_shift
def __magpy_mock(fn, args, kwargs, inputs):
    __magpy_outs = __magpy_graph(*inputs)
    return __magpy_outs[0]

# constants:
#   __magpy_graph = <bound method forward of GraphModule()>
