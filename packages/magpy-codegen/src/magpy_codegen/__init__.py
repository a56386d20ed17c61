"""MagPy's code generation: guards, mocks, and lowering of operator graphs to a backend."""

from ._backend import BACKENDS, ShapeGuard, compile_graph, resolve_backend, shape_guard
from ._generated import GeneratedCode, NameAllocator, forget_generated
from ._guard import generate_guard
from ._instrument import Instrumented, Layout, instrument
from ._mock import generate_mock
from ._record import Record, build_record

__version__ = "0.1.0"

__all__ = [
    "BACKENDS",
    "GeneratedCode",
    "Instrumented",
    "Layout",
    "NameAllocator",
    "Record",
    "ShapeGuard",
    "build_record",
    "compile_graph",
    "forget_generated",
    "generate_guard",
    "generate_mock",
    "instrument",
    "resolve_backend",
    "shape_guard",
]
