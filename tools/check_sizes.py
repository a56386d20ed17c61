"""Fail if a module or a function of MagPy's source is too long (run by ``nox -s sizes``).

The limits: a module under ``packages/*/src`` or ``src/`` has at most MAX_MODULE_LINES lines,
and a function (``def`` or ``async def``: methods and nested functions too) at most
MAX_FUNCTION_LINES, counted with ``ast`` from its ``def`` line to its last line (decorators do
not count). Split a module, or extract helpers from a function, before it gets there.

Usage::

    python tools/check_sizes.py                       # every module under packages/*/src, src/
    python tools/check_sizes.py --top 10              # print the 10 largest of each
    python tools/check_sizes.py --paths 'src/**/*.py' packages/magpy-runtime/src

``--paths`` takes files, directories (their ``*.py``, recursively) and globs, relative to the
repository root. Stdlib only.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
DEFAULT_PATHS = ("packages/*/src/**/*.py", "src/**/*.py")


class Size(NamedTuple):
    lines: int
    path: Path  # relative to ROOT where possible
    lineno: int
    name: str  # the function's qualified name ("Class.method", "outer.inner"); "" for a module


def modules(patterns: Iterable[str]) -> list[Path]:
    """The ``.py`` files that ``patterns`` name: files, directories (recursively) or globs."""
    found: set[Path] = set()
    for pattern in patterns:
        path = ROOT / pattern
        if path.is_dir():
            found.update(path.rglob("*.py"))
        elif path.is_file():
            found.add(path)
        else:
            found.update(p for p in ROOT.glob(pattern) if p.is_file() and p.suffix == ".py")
    return sorted(p.resolve() for p in found)


def _relative(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """(qualified name, node) of every function in ``tree``, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                yield name, node
            yield from functions(node, f"{name}.")
        else:
            yield from functions(node, prefix)


def measure(paths: Iterable[Path]) -> tuple[list[Size], list[Size]]:
    """(module sizes, function sizes), each largest first."""
    module_sizes: list[Size] = []
    function_sizes: list[Size] = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        where = _relative(path)
        module_sizes.append(Size(len(text.splitlines()), where, 1, ""))
        for name, node in functions(ast.parse(text, filename=str(path))):
            assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            end = node.end_lineno if node.end_lineno is not None else node.lineno
            function_sizes.append(Size(end - node.lineno + 1, where, node.lineno, name))
    return sorted(module_sizes, reverse=True), sorted(function_sizes, reverse=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--top", type=int, default=5, help="how many of the largest to print")
    parser.add_argument(
        "--paths",
        nargs="+",
        default=list(DEFAULT_PATHS),
        metavar="PATH",
        help="files, directories or globs relative to the repository root "
        f"(default: {' '.join(DEFAULT_PATHS)})",
    )
    args = parser.parse_args(argv)

    module_sizes, function_sizes = measure(modules(args.paths))
    total = sum(s.lines for s in module_sizes)
    print(f"{len(module_sizes)} modules, {total} lines; largest:")
    for s in module_sizes[: args.top]:
        print(f"  {s.lines:5d}  {s.path}")
    print(f"{len(function_sizes)} functions; largest:")
    for s in function_sizes[: args.top]:
        print(f"  {s.lines:5d}  {s.path}:{s.lineno}  {s.name}")

    errors = [
        f"error: {s.path}:{s.lineno}: module has {s.lines} lines; the limit is "
        f"{MAX_MODULE_LINES}. Split it."
        for s in module_sizes
        if s.lines > MAX_MODULE_LINES
    ]
    errors += [
        f"error: {s.path}:{s.lineno}: function {s.name} has {s.lines} lines; the limit is "
        f"{MAX_FUNCTION_LINES}. Extract helpers."
        for s in function_sizes
        if s.lines > MAX_FUNCTION_LINES
    ]
    for error in errors:
        print(error)
    if not module_sizes:
        print(f"error: no modules match {args.paths}")
        return 1
    print(f"sizes: {len(errors)} over the limits" if errors else "sizes ok")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
