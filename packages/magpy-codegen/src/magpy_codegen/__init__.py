"""MagPy's code generation: guards, mocks, and lowering of operator graphs to a backend."""

from ._backend import (
    BACKENDS,
    ConfiguredInductor,
    ShapeGuard,
    compile_graph,
    configured_backend,
    resolve_backend,
    shape_guard,
)
from ._background import (
    CompileJob,
    cancel_compiles,
    compiles_later,
    pending_compiles,
    submit,
    wait_compiles,
)
from ._cbuild import NativeSettings, install_snapcheck, snapcheck_artifact
from ._cbuild import configure as configure_native
from ._generated import GeneratedCode, NameAllocator, forget_generated
from ._guard import generate_guard
from ._guards import Guard, MemoGuard, PythonGuard
from ._instrument import Instrumented, Layout, instrument
from ._mock import generate_mock
from ._native import (
    NativeGraph,
    compile_native,
    load_native,
    native_platform,
    native_problem,
)
from ._record import Record, build_record, record_guard
from ._trust import directory_problem as trusted_directory
from ._trust import open_trusted, write_private

__version__ = "0.1.0"

__all__ = [
    "BACKENDS",
    "CompileJob",
    "ConfiguredInductor",
    "GeneratedCode",
    "Guard",
    "Instrumented",
    "Layout",
    "MemoGuard",
    "NameAllocator",
    "NativeGraph",
    "NativeSettings",
    "PythonGuard",
    "Record",
    "ShapeGuard",
    "build_record",
    "cancel_compiles",
    "compile_graph",
    "compile_native",
    "compiles_later",
    "configure_native",
    "configured_backend",
    "forget_generated",
    "generate_guard",
    "generate_mock",
    "install_snapcheck",
    "instrument",
    "load_native",
    "native_platform",
    "native_problem",
    "open_trusted",
    "pending_compiles",
    "record_guard",
    "resolve_backend",
    "shape_guard",
    "snapcheck_artifact",
    "submit",
    "trusted_directory",
    "wait_compiles",
    "write_private",
]
