"""Check the import layering of MagPy's source with ``ast`` (run by ``nox -s layering``).

Layers, lowest first: magpy_refgraph < magpy_monitor < magpy_codegen < magpy_runtime < magpy.
Every import counts, including ones inside functions and ``if TYPE_CHECKING:`` blocks, and
``importlib.import_module("x")`` / ``__import__("x")`` calls with a literal name. It fails when

* a module imports a magpy package above its own layer,
* a package imports a magpy package that its pyproject.toml does not declare (transitively),
* magpy_refgraph imports torch or numpy (or triton/functorch).
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("magpy_refgraph", "magpy_monitor", "magpy_codegen", "magpy_runtime", "magpy")
FORBIDDEN = {"magpy_refgraph": {"torch", "numpy", "triton", "functorch"}}


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
        elif isinstance(node, ast.Call) and node.args and _is_dynamic_import(node.func):
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield node.lineno, arg.value


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in {"__import__", "import_module"}
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def check() -> list[str]:
    errors: list[str] = []
    allowed = declared_deps()
    for pkg, directory in source_roots().items():
        if pkg not in LAYERS:
            errors.append(f"{directory}: package {pkg} is missing from LAYERS in {__file__}")
            continue
        layer = LAYERS.index(pkg)
        for path in sorted(directory.rglob("*.py")):
            where = path.relative_to(ROOT)
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for lineno, module in imported_modules(tree):
                top = module.partition(".")[0]
                if top in FORBIDDEN.get(pkg, ()):
                    errors.append(f"{where}:{lineno}: {pkg} must not import {module}")
                elif top in LAYERS and LAYERS.index(top) > layer:
                    errors.append(f"{where}:{lineno}: {pkg} imports {top}, a higher layer")
                elif top in LAYERS and top not in allowed.get(pkg, {pkg}):
                    errors.append(
                        f"{where}:{lineno}: {pkg} imports {top} but its pyproject.toml does not"
                        " depend on it"
                    )
    return errors


def main() -> int:
    errors = check()
    for error in errors:
        print(error)
    order = " < ".join(LAYERS)
    print(f"layering: {len(errors)} violation(s) of {order}" if errors else f"layering ok: {order}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
