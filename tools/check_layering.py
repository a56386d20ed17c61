"""Check the import layering of MagPy's source with ``ast`` (run by ``nox -s layering``).

Layers, lowest first: magpy_refgraph < magpy_monitor < magpy_codegen < magpy_runtime < magpy.
Every import counts, including ones inside functions and ``if TYPE_CHECKING:`` blocks, and
``importlib.import_module("x")`` / ``__import__("x")`` calls with a literal name. It fails when

* a module imports a magpy package above its own layer,
* a package imports a magpy package that its pyproject.toml does not declare (transitively),
* magpy_codegen or magpy_runtime imports a submodule of magpy_monitor instead of the names
  ``magpy_monitor`` exports (its public API, PUBLIC_ONLY),
* magpy_refgraph imports torch or numpy (or triton/functorch),
* inside magpy_monitor, a module imports a subpackage above its own (MONITOR_LAYERS, and within
  ``libs`` LIBS_LAYERS; relative imports are resolved against the module's package), or a
  module lies in no declared subpackage (while MONITOR_LAYERS_REQUIRED),
* a module outside ``magpy_monitor/cpython`` reads ``sys.version_info`` (or
  ``sys.hexversion``): interpreter facts live behind ``magpy_monitor.INTERP``,
* a module other than ``magpy_runtime/_config.py`` names a ``MAGPY_*`` environment variable (a
  string that is exactly such a name), except as the argument of that module's ``environ(...)``:
  the runtime's config is the one reader of MagPy's variables,
* inside a package of ACYCLIC, modules import each other in a circle (every import counts,
  ``if TYPE_CHECKING:`` ones included: a type-only import that closes a circle is still a
  circle; break it with a Protocol or by moving the shared type down),
* a module of a subpackage in NOT_ABOVE imports a subpackage it lies below (``magpy_runtime``'s
  ``store`` never imports its ``cache``), even where no circle closes,
* a function of one of the packages imports something (``import`` in a function body, or a
  dynamic import with a literal name), unless FUNCTION_IMPORTS_ALLOWED names that function with
  a reason. Import at module level; an ``if TYPE_CHECKING:`` block there is fine.

Usage: ``python tools/check_layering.py [--skip-monitor]``; ``--skip-monitor`` leaves out the
checks of magpy_monitor's own modules (its subpackage layering and its function imports).
Stdlib only.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("magpy_refgraph", "magpy_monitor", "magpy_codegen", "magpy_runtime", "magpy")
FORBIDDEN = {"magpy_refgraph": {"torch", "numpy", "triton", "functorch"}}

# magpy_monitor's subpackages, lowest first: a module may import only from its own subpackage
# and the ones before it. ``magpy_monitor/__init__.py`` counts as the top (like ``driver``).
MONITOR = "magpy_monitor"
MONITOR_LAYERS = ("cpython", "core", "bytecode", "pyobj", "libs", "driver")
# ``libs``' own subpackages, lowest first (``libs/__init__.py`` counts as the top, like torch).
LIBS_LAYERS = ("stdlib", "numpy", "torch", "transformers")
SUBLAYERS: dict[str, tuple[str, ...]] = {
    MONITOR: MONITOR_LAYERS,
    f"{MONITOR}.libs": LIBS_LAYERS,
}
# Every module of magpy_monitor (other than its __init__) must lie in one of MONITOR_LAYERS.
MONITOR_LAYERS_REQUIRED = True

# Functions that may import inside their body: (module path, function qualname) -> why. Keep it
# short; every entry is a cost paid at call time instead of once at import.
MAX_FUNCTION_IMPORTS_ALLOWED = 5
FUNCTION_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {
    ("src/magpy/_cli.py", "_run_command"): (
        "the commands import torch._dynamo and Inductor (seconds); --help and usage errors don't"
    ),
    ("packages/magpy-codegen/src/magpy_codegen/_backend.py", "_torch_compiler"): (
        "importing torch._inductor or torch._dynamo takes seconds; only that backend needs it"
    ),
    ("packages/magpy-codegen/src/magpy_codegen/_backend.py", "_inductor_settings"): (
        "mode/options of magpy.compile are checked against Inductor's config (seconds to import)"
    ),
    ("packages/magpy-monitor/src/magpy_monitor/core/shapes.py", "symbolic_shapes"): (
        "torch's symbolic_shapes (sympy) takes ~1 s to import; only dynamic sizes need it"
    ),
}


def source_roots() -> dict[str, Path]:
    """{import name: its package directory} for the four packages and the meta-package."""
    roots = {p.name: p for p in sorted(ROOT.glob("packages/magpy-*/src/magpy_*")) if p.is_dir()}
    roots["magpy"] = ROOT / "src" / "magpy"
    return roots


def _import_name(dist: str) -> str:
    return dist.lower().replace("-", "_")


def declared_deps() -> dict[str, set[str]]:
    """{import name: import names of the magpy packages it may use}, from the pyprojects."""
    direct: dict[str, set[str]] = {}
    for pyproject in [*ROOT.glob("packages/magpy-*/pyproject.toml"), ROOT / "pyproject.toml"]:
        project = tomllib.loads(pyproject.read_text())["project"]
        names = (re.split(r"[^A-Za-z0-9._-]", r, maxsplit=1)[0] for r in project["dependencies"])
        direct[_import_name(project["name"])] = {
            _import_name(n) for n in names if n.startswith("magpy")
        }
    closure: dict[str, set[str]] = {}
    for pkg in direct:
        seen, stack = {pkg}, [pkg]
        while stack:
            for dep in direct.get(stack.pop(), ()):
                if dep not in seen:
                    seen.add(dep)
                    stack.append(dep)
        closure[pkg] = seen
    return closure


def imported_modules(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) for every import in ``tree``; relative imports are skipped."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
        elif (name := _dynamic_import(node)) is not None:
            yield node.lineno, name


def _dynamic_import(node: ast.AST) -> str | None:
    """The literal module name of an ``import_module("x")`` / ``__import__("x")`` call."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    if isinstance(func, ast.Name):
        dynamic = func.id in {"__import__", "import_module"}
    else:
        dynamic = isinstance(func, ast.Attribute) and func.attr == "import_module"
    arg = node.args[0]
    if dynamic and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    return None


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


# Packages that may use only the top-level names of another magpy package, per importer.
PUBLIC_ONLY: dict[str, frozenset[str]] = {
    "magpy_codegen": frozenset({"magpy_monitor"}),
    "magpy_runtime": frozenset({"magpy_monitor"}),
}


def check_packages() -> list[str]:
    """Imports between the packages follow LAYERS and the pyprojects; refgraph sees no torch."""
    errors: list[str] = []
    allowed = declared_deps()
    for pkg, directory in source_roots().items():
        if pkg not in LAYERS:
            errors.append(f"{directory}: package {pkg} is missing from LAYERS in {__file__}")
            continue
        layer = LAYERS.index(pkg)
        for path in sorted(directory.rglob("*.py")):
            where = path.relative_to(ROOT)
            for lineno, module in imported_modules(_parse(path)):
                top = module.partition(".")[0]
                if top in FORBIDDEN.get(pkg, ()):
                    errors.append(f"{where}:{lineno}: {pkg} must not import {module}")
                elif top in LAYERS and LAYERS.index(top) > layer:
                    errors.append(f"{where}:{lineno}: {pkg} imports {top}, a higher layer")
                elif top in PUBLIC_ONLY.get(pkg, ()) and module != top:
                    errors.append(
                        f"{where}:{lineno}: {pkg} imports {module}; use the names {top} exports"
                    )
                elif top in LAYERS and top not in allowed.get(pkg, {pkg}):
                    errors.append(
                        f"{where}:{lineno}: {pkg} imports {top} but its pyproject.toml does not"
                        " depend on it"
                    )
    return errors


# --- inside magpy_monitor ------------------------------------------------------------------------


def module_name(path: Path, package_dir: Path) -> str:
    """The dotted name of the module at ``path`` in the package rooted at ``package_dir``."""
    parts = [package_dir.name, *path.relative_to(package_dir).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(name: str, package_dir: Path) -> bool:
    """Whether the dotted ``name`` is a module or package in the tree of ``package_dir``."""
    parts = name.split(".")
    if parts[0] != package_dir.name:
        return False
    base = package_dir.joinpath(*parts[1:])
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def resolved_imports(
    tree: ast.AST, name: str, is_package: bool, package_dir: Path
) -> Iterator[tuple[int, str]]:
    """(line, absolute name) of every module that module ``name`` imports, relative imports
    resolved. ``from X import y`` names ``X.y`` where that is a module of ``package_dir``'s
    tree, else ``X``. A relative import above the top package gives ``""``."""
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                if node.level > len(parts):
                    yield node.lineno, ""
                    continue
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield node.lineno, sub if _exists(sub, package_dir) else base
        elif (dynamic := _dynamic_import(node)) is not None:
            yield node.lineno, dynamic


def _ranks(name: str) -> dict[str, int | None]:
    """{package with SUBLAYERS: rank of ``name`` among its subpackages} for each such package
    that ``name`` lies in: the index of its subpackage, the top index for the package itself
    (and its ``__init__``), None where it lies in no declared subpackage."""
    ranks: dict[str, int | None] = {}
    for package, layers in SUBLAYERS.items():
        if name == package:
            ranks[package] = len(layers) - 1
        elif name.startswith(f"{package}."):
            sub = name[len(package) + 1 :].partition(".")[0]
            ranks[package] = layers.index(sub) if sub in layers else None
    return ranks


def check_monitor_layers() -> list[str]:
    """Inside magpy_monitor: every module lies in a declared subpackage and imports only from
    its own and lower ones (MONITOR_LAYERS; LIBS_LAYERS inside ``libs``)."""
    package_dir = source_roots()[MONITOR]
    errors: list[str] = []
    if MONITOR_LAYERS_REQUIRED:
        for package, layers in SUBLAYERS.items():
            for sub in layers:
                if not _exists(f"{package}.{sub}", package_dir):
                    errors.append(f"{package}.{sub}: declared in SUBLAYERS but does not exist")
    for path in sorted(package_dir.rglob("*.py")):
        where = path.relative_to(ROOT)
        name = module_name(path, package_dir)
        mine = _ranks(name)
        if None in mine.values():
            if MONITOR_LAYERS_REQUIRED:
                errors.append(f"{where}: {name} is not in a layer ({_layers_text()})")
            continue
        tree = _parse(path)
        imports = resolved_imports(tree, name, path.name == "__init__.py", package_dir)
        for lineno, target in sorted(set(imports)):
            if not target:
                errors.append(f"{where}:{lineno}: relative import beyond {MONITOR}")
                continue
            for package, rank in _ranks(target).items():
                own = mine.get(package)
                if rank is not None and own is not None and rank > own:
                    layers = SUBLAYERS[package]
                    errors.append(
                        f"{where}:{lineno}: {name} ({package}.{layers[own]}) imports {target}"
                        f" ({package}.{layers[rank]}), a higher layer"
                    )
    return errors


def _layers_text() -> str:
    return "; ".join(f"{p}: {' < '.join(layers)}" for p, layers in SUBLAYERS.items())


# --- circles inside a package ---------------------------------------------------------------

# Packages whose modules must not import each other in a circle.
ACYCLIC = ("magpy_runtime",)


def module_imports(package_dir: Path) -> dict[str, set[str]]:
    """{module: modules of the same package it imports} for every module in ``package_dir``
    (any import: module level, in functions, under ``if TYPE_CHECKING:``)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        name = module_name(path, package_dir)
        tree = _parse(path)
        found = resolved_imports(tree, name, path.name == "__init__.py", package_dir)
        graph[name] = {
            target for _, target in found if target != name and _exists(target, package_dir)
        }
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (``[a, b, ..., a]``) through each strongly connected group of ``graph`` that
    has more than one module, in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [_circle(graph, group) for group in sorted(groups)]


def _circle(graph: dict[str, set[str]], group: list[str]) -> list[str]:
    """A shortest circle from ``group[0]`` back to itself inside ``group``."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & members):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    raise AssertionError(f"{group} is not strongly connected")


def check_cycles(roots: dict[str, Path] | None = None) -> list[str]:
    """Modules of an ACYCLIC package that import each other in a circle."""
    roots = roots or source_roots()
    errors: list[str] = []
    for pkg in ACYCLIC:
        if pkg not in roots:
            continue
        for circle in cycles(module_imports(roots[pkg])):
            errors.append(
                f"{pkg}: import circle {' -> '.join(circle)} (TYPE_CHECKING imports count; "
                "break it with a Protocol or by moving the shared type down)"
            )
    return errors


# Subpackages that lie below others of the same package: a module of the key must not import the
# subpackages named (no circle needed). The runtime's store (records outside the process) is used
# by its cache (the path of a call), never the reverse.
NOT_ABOVE: dict[str, tuple[str, ...]] = {"magpy_runtime.store": ("magpy_runtime.cache",)}


def check_subpackage_order(roots: dict[str, Path] | None = None) -> list[str]:
    """Modules of a NOT_ABOVE subpackage that import a subpackage it lies below."""
    roots = roots or source_roots()
    errors: list[str] = []
    for low, highs in NOT_ABOVE.items():
        pkg = low.partition(".")[0]
        if pkg not in roots:
            continue
        for name, targets in sorted(module_imports(roots[pkg]).items()):
            if name != low and not name.startswith(f"{low}."):
                continue
            for target in sorted(targets):
                for high in highs:
                    if target == high or target.startswith(f"{high}."):
                        errors.append(f"{name} imports {target}: {low} lies below {high}")
    return errors


# --- imports inside functions ----------------------------------------------------------------


def function_imports(tree: ast.AST) -> Iterator[tuple[int, str, str]]:
    """(line, qualname of the innermost enclosing function, module) for every import that runs
    inside a function body (relative imports as written, with their dots)."""

    def visit(node: ast.AST, scope: list[str], in_function: bool) -> Iterator[tuple[int, str, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield from visit(child, [*scope, child.name], True)
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, [*scope, child.name], in_function)
            else:
                if in_function:
                    for module in _imports_of(child):
                        yield child.lineno, ".".join(scope), module
                yield from visit(child, scope, in_function)

    yield from visit(tree, [], False)


def _imports_of(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        return ["." * node.level + (node.module or "")]
    dynamic = _dynamic_import(node)
    return [dynamic] if dynamic is not None else []


def check_function_imports(skip: frozenset[str] = frozenset()) -> list[str]:
    """No imports in function bodies except FUNCTION_IMPORTS_ALLOWED (stale entries fail too)."""
    errors: list[str] = []
    if len(FUNCTION_IMPORTS_ALLOWED) > MAX_FUNCTION_IMPORTS_ALLOWED:
        errors.append(
            f"FUNCTION_IMPORTS_ALLOWED has {len(FUNCTION_IMPORTS_ALLOWED)} entries; at most "
            f"{MAX_FUNCTION_IMPORTS_ALLOWED}"
        )
    for (where, qualname), reason in FUNCTION_IMPORTS_ALLOWED.items():
        if not reason.strip() or "\n" in reason:
            errors.append(f"{where}: {qualname}: the allow-list reason must be one line")
    used: set[tuple[str, str]] = set()
    for pkg, directory in source_roots().items():
        for path in sorted(directory.rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            for lineno, qualname, module in function_imports(_parse(path)):
                if (where, qualname) in FUNCTION_IMPORTS_ALLOWED:
                    used.add((where, qualname))
                elif pkg not in skip:
                    errors.append(
                        f"{where}:{lineno}: {qualname} imports {module} in its body; import "
                        "at module level"
                    )
    for where, qualname in sorted(FUNCTION_IMPORTS_ALLOWED.keys() - used):
        errors.append(f"{where}: {qualname} is in FUNCTION_IMPORTS_ALLOWED but imports nothing")
    return errors


# The one place that may test which interpreter runs (sys.version_info, sys.hexversion):
# magpy_monitor.cpython. Everything else asks its ``INTERP``. (``sys.version``, a string for
# cache keys and messages, is no test.)
INTERPRETER_FACTS = ("magpy_monitor/cpython/",)
_VERSION_ATTRS = frozenset({"version_info", "hexversion"})


def check_version_tests() -> list[str]:
    """``sys.version_info`` (or ``sys.hexversion``) outside the interpreter layer: a version
    test belongs in ``magpy_monitor.cpython``'s ``Interpreter``."""
    errors: list[str] = []
    for root in source_roots().values():
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if any(part in rel for part in INTERPRETER_FACTS):
                continue
            for node in ast.walk(_parse(path)):
                if (
                    isinstance(node, ast.Attribute)
                    and node.attr in _VERSION_ATTRS
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "sys"
                ):
                    errors.append(
                        f"{rel}:{node.lineno}: sys.{node.attr} outside magpy_monitor.cpython "
                        "(ask magpy_monitor.INTERP)"
                    )
    return errors


# The one module that reads MagPy's environment variables (its ``environ`` is the reader).
CONFIG_MODULE = "packages/magpy-runtime/src/magpy_runtime/_config.py"
_VARIABLE = re.compile(r"MAGPY_[A-Z0-9_]+")


def _environ_arguments(tree: ast.AST) -> set[int]:
    """ids of the string constants passed first to a call of ``environ``."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name == "environ":
                found.add(id(node.args[0]))
    return found


def check_environment_reads(roots: dict[str, Path] | None = None) -> list[str]:
    """A ``MAGPY_*`` variable named outside the runtime's config (other than as the argument
    of its ``environ``): the settings of the packages are read in one place."""
    errors: list[str] = []
    for root in (roots or source_roots()).values():
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
            if rel == CONFIG_MODULE:
                continue
            tree = _parse(path)
            allowed = _environ_arguments(tree)
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and _VARIABLE.fullmatch(node.value)
                    and id(node) not in allowed
                ):
                    errors.append(
                        f"{rel}:{node.lineno}: {node.value} named outside {CONFIG_MODULE}; read "
                        "it there (Config field or environ()) and pass the setting down"
                    )
    return errors


def check(skip_monitor: bool = False) -> list[str]:
    errors = check_packages() + check_version_tests() + check_environment_reads()
    errors += check_cycles() + check_subpackage_order()
    if not skip_monitor:
        errors += check_monitor_layers()
    errors += check_function_imports(frozenset({MONITOR}) if skip_monitor else frozenset())
    return errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--skip-monitor",
        action="store_true",
        help=f"leave out the checks of {MONITOR}'s own modules (subpackages, function imports)",
    )
    args = parser.parse_args(argv)
    errors = check(skip_monitor=args.skip_monitor)
    for error in errors:
        print(error)
    order = " < ".join(LAYERS)
    if not args.skip_monitor:
        order += f"; {_layers_text()}"
    print(f"layering: {len(errors)} violation(s) of {order}" if errors else f"layering ok: {order}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
