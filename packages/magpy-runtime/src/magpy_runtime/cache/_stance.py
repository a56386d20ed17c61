"""The compiler's stance: ``torch.compiler.set_stance`` (and ``magpy.set_stance``, the same).

The stance is torch's own state (``torch._dynamo.eval_frame._stance``), read on every compiled
call, so a stance set through either function, as a decorator, a context manager or a plain
call, holds for MagPy and TorchDynamo alike. Where TorchDynamo was never imported, no stance was
ever set: the default. What each stance does to a call of a compiled callable:

- ``"default"``: records are served, a call none serves is monitored and recorded.
- ``"force_eager"``: the original code runs, as under ``magpy.disable()`` (no record is served
  or made; the sites of a split program step aside).
- ``"eager_on_recompile"``: records are served; a call none serves runs natively (its sites
  serve their records and record nothing).
- ``"fail_on_recompile"``: records are served; a call that would be monitored and recorded
  raises ``StanceError`` (a ``RuntimeError``), also the first call of a callable, as in
  TorchDynamo; a site of a split program that would record raises it in the program.
- ``"eager_then_compile"`` (and ``"aot_eager_then_compile"``, whose first call would only save
  memory): the first call no record serves runs natively and is kept as an example; the next
  such call records, with the tensor sizes and scalars that differ between the two dynamic
  from its first record (TorchDynamo infers dynamism from its first two calls the same way).
- ``force_backend=`` (only with ``"default"``): records are made with that backend, in a cache
  of their own per backend; the callable's other records are not served meanwhile.
- ``skip_guard_eval_unsafe=True``: refused (``StanceError``). A record's guard is what decides
  that the graph and the mock replay this call's program: there is no subset of it that could
  be skipped without replaying a record for state it never saw (TorchDynamo skips all but the
  guards that tell its cache entries apart, and says that may silently give wrong results).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

from magpy_monitor import dim_key
from magpy_refgraph import Item, Local, Path

from .._errors import StanceError

__all__ = [
    "STANCES",
    "changed_between",
    "check",
    "current",
    "example_of",
    "records_here",
    "set_stance",
    "site_records",
    "stance_records",
    "under_stance",
]

_EVAL_FRAME = "torch._dynamo.eval_frame"  # where torch keeps the stance (``_stance``)
STANCES = (
    "default",
    "force_eager",
    "eager_on_recompile",
    "fail_on_recompile",
    "eager_then_compile",
    "aot_eager_then_compile",
)
_DELAYED = ("eager_then_compile", "aot_eager_then_compile")
_NO_RECORDS = ("force_eager", "eager_on_recompile", "fail_on_recompile")
_UNSAFE = (
    "skip_guard_eval_unsafe=True is not supported by MagPy: a record's guard decides that its "
    "graph and mock replay this call of the program, and no part of it can be skipped without "
    "replaying a record for state it never checked (silently wrong results)"
)


def current() -> Any:
    """torch's stance object where it is not plainly the default, else None (also when
    TorchDynamo was never imported: then no one set a stance)."""
    module = sys.modules.get(_EVAL_FRAME)
    if module is None:
        return None
    stance = module._stance
    if stance.stance == "default" and stance.backend is None and not stance.skip_guard_eval_unsafe:
        return None
    return stance


def check(stance: Any) -> None:
    """Refuse a stance MagPy cannot honour (``StanceError``, torch's message for an unknown
    one)."""
    if stance.skip_guard_eval_unsafe:
        raise StanceError(_UNSAFE)
    if stance.stance not in STANCES:
        raise StanceError(f"invalid torch.compile stance '{stance.stance}'; known: {STANCES}")


def under_stance(stance: Any, state: Any) -> Any:
    """The record cache a compiled call goes through under ``stance`` (checked first):
    ``state``, its cache for a forced backend, or None where the original code runs."""
    check(stance)
    if stance.stance == "force_eager":
        return None
    forced = stance.backend
    if (
        forced is None
        or forced is state.backend
        or (type(forced) is str and forced == state.backend)
    ):
        return state  # (forced to the backend it compiles with anyway)
    return state.forced(forced)


def records_here(stance: Any, state: Any, args: Any, kwargs: dict[str, Any]) -> bool:
    """Whether a call that no record served, and that would otherwise be recorded, is recorded
    under ``stance`` (False: it runs natively). ``fail_on_recompile`` raises ``StanceError``;
    the first such call under a delayed stance is kept as an example, the second makes what
    changed since dynamic."""
    name = stance.stance
    if name == "eager_on_recompile":
        return False
    if name == "fail_on_recompile":
        raise StanceError(
            f"Detected recompile when torch.compile stance is 'fail_on_recompile': "
            f"{state.qualname} has {len(state.records)} record(s) and none serves this call"
        )
    if name in _DELAYED:
        if state.first_example is None:
            state.first_example = example_of(args, kwargs)
            return False
        if state.dynamic is not False:
            state.dynamic_paths |= changed_between(state.first_example, example_of(args, kwargs))
    return True


def site_records(stance: Any) -> bool:
    """Whether a site of a split program records under ``stance``; ``fail_on_recompile``
    raises ``StanceError`` in the program there."""
    if stance is None or stance.stance not in _NO_RECORDS:
        return True
    if stance.stance == "fail_on_recompile":
        raise StanceError(
            "Detected recompile when torch.compile stance is 'fail_on_recompile': a site of a "
            "split program has no record for this call"
        )
    return False


def stance_records() -> bool:
    """Whether the current stance lets a record be made (no error raised)."""
    stance = current()
    return stance is None or stance.stance not in _NO_RECORDS


# ---------------------------------------------------------------------- examples (delayed)
_MAX_DEPTH = 3  # containers nested in the arguments that are looked into


def example_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[Path, Any]:
    """The sizes of the plain tensors and the int/float values among a call's arguments (in
    lists, tuples and dicts too), by the entry path a capture names them with."""
    out: dict[Path, Any] = {}
    _walk(Path(Local("args")), args, out, 0)
    _walk(Path(Local("kwargs")), kwargs, out, 0)
    return out


def _walk(path: Path, obj: Any, out: dict[Path, Any], depth: int) -> None:
    if type(obj) is torch.Tensor:
        out[path] = tuple(obj.shape)
    elif type(obj) in (int, float):
        out[path] = obj
    elif depth < _MAX_DEPTH and type(obj) in (list, tuple):
        for i, item in enumerate(obj):
            _walk(path.child(Item(i)), item, out, depth + 1)
    elif depth < _MAX_DEPTH and type(obj) is dict:
        for key, item in obj.items():
            if type(key) in (str, int):
                _walk(path.child(Item(key)), item, out, depth + 1)


def changed_between(first: dict[Path, Any], now: dict[Path, Any]) -> set[Path]:
    """The dynamic paths (``dim_key``s of sizes, scalar paths) of what differs between two
    examples: a size of a tensor of the same rank, a scalar of the same type."""
    changed: set[Path] = set()
    for path, old in first.items():
        new = now.get(path)
        if type(new) is not type(old) or new == old:
            continue
        if isinstance(old, tuple) and isinstance(new, tuple):
            if len(old) == len(new):
                changed |= {
                    dim_key(path, d)
                    for d, (a, b) in enumerate(zip(old, new, strict=True))
                    if a != b
                }
        else:
            changed.add(path)
    return changed


# ---------------------------------------------------------------------- the public function
def set_stance(
    stance: str = "default",
    *,
    skip_guard_eval_unsafe: bool = False,
    force_backend: str | Callable[..., Any] | None = None,
) -> Any:
    """``magpy.set_stance``: ``torch.compiler.set_stance``, checked first: a stance MagPy
    refuses (``skip_guard_eval_unsafe=True``, an unknown name) raises ``StanceError`` before
    anything is set. Usable as a plain call, a context manager and a decorator; the stance is
    torch's, so it holds for ``torch.compile`` too."""
    if skip_guard_eval_unsafe:
        raise StanceError(_UNSAFE)
    if stance not in STANCES:
        raise StanceError(f"unknown stance {stance!r}; known: {STANCES}")
    return torch.compiler.set_stance(stance, force_backend=force_backend)
