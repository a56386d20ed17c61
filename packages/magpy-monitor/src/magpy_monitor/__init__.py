"""MagPy's monitor: watches CPython 3.11 run a program and captures its RefGraph and fx graph."""

from .bytecode.variables import Defines
from .core.ambient import ambient_state
from .core.annotations import TABLE, Annotation, AnnotationTable, Kind, classify
from .core.attributes import ClassEntry
from .core.calls import ORIGINAL_CODE, CodeOf, disabled_function
from .core.capture import Capture
from .core.growing import length_key
from .core.scalars import scalar_tensor
from .core.shapes import FAKE, dim_key, symbolic_shapes
from .core.speculation import is_random
from .core.undo import UPDATE_RULES
from .core.values import Val
from .core.valuetypes import FROZEN_MODULE_ROOTS, hooked_tensor_type
from .core.views import is_view
from .cpython import compat as _compat  # noqa: F401  (fails at import on other Python versions)
from .cpython.current import INTERP
from .cpython.frameio import NULL, StackView, read_stack, stack_depth
from .cpython.interp import Interpreter
from .driver.api import CaptureResult, capture, entry, finish, prepare
from .driver.segments import CodeInfo, Segment, SegmentHost, is_monitoring, start_segment
from .libs.stdlib.warnspy import quiet_nodes
from .libs.torch.regions import REGION

__version__ = "0.1.0"

__all__ = [
    "FAKE",
    "FROZEN_MODULE_ROOTS",
    "INTERP",
    "NULL",
    "ORIGINAL_CODE",
    "REGION",
    "TABLE",
    "UPDATE_RULES",
    "Annotation",
    "AnnotationTable",
    "Capture",
    "CaptureResult",
    "ClassEntry",
    "CodeInfo",
    "CodeOf",
    "Defines",
    "Interpreter",
    "Kind",
    "Segment",
    "SegmentHost",
    "StackView",
    "Val",
    "ambient_state",
    "capture",
    "classify",
    "dim_key",
    "disabled_function",
    "entry",
    "finish",
    "hooked_tensor_type",
    "is_monitoring",
    "is_random",
    "is_view",
    "length_key",
    "prepare",
    "quiet_nodes",
    "read_stack",
    "scalar_tensor",
    "stack_depth",
    "start_segment",
    "symbolic_shapes",
]
