"""The differential suite against MagPy and TorchDynamo, as one table.

    python integration/differential_report.py [--backend eager|inductor] [--out FILE]

Loads every ``integration/test_differs_*.py``, runs each case eagerly, with MagPy and with
``torch.compile`` (same backend), and prints per compiler the counts of each verdict (silent
wrong value, wrong exception, frame-only difference, crash, no cache hit) by category, then the
cases where the two disagree. ``nox -s differential`` runs it.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import sys
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_NAME = "_integration_differential"


def _load() -> object:
    if _NAME not in sys.modules:
        spec = importlib.util.spec_from_file_location(_NAME, _HERE / "differential.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[_NAME] = module
        spec.loader.exec_module(module)
    for path in sorted(_HERE.glob("test_differs_*.py")):
        name = f"_differs_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[_NAME]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="eager", choices=["eager", "inductor"])
    ap.add_argument("--out", help="also write the table to this file")
    ap.add_argument("-k", default="", help="only cases whose name contains this")
    opts = ap.parse_args(argv)
    D = _load()
    cases = [c for c in D.CASES if opts.k in c.name]  # type: ignore[attr-defined]
    if opts.backend == "inductor":
        cases = [c for c in cases if c.inductor]
    compilers = ("magpy", "dynamo")
    verdicts: dict[str, dict[str, object]] = {k: {} for k in compilers}
    start = time.perf_counter()
    for c in cases:
        for k in compilers:
            verdict, diffs = D.classify(c, backend=opts.backend, compiler=k)  # type: ignore[attr-defined]
            verdicts[k][c.name] = (verdict, diffs[:1])
    lines = [
        f"differential suite: {len(cases)} cases, backend={opts.backend}, "
        f"{time.perf_counter() - start:.0f} s",
        "",
    ]
    kinds = [v for v in D.Verdict if v is not D.Verdict.SAME]  # type: ignore[attr-defined]
    lines.append("| compiler | same | " + " | ".join(v.value for v in kinds) + " |")
    lines.append("|---" * (len(kinds) + 2) + "|")
    for k in compilers:
        counts = collections.Counter(v for v, _ in verdicts[k].values())  # type: ignore[misc]
        same = counts[D.Verdict.SAME]  # type: ignore[attr-defined]
        lines.append(f"| {k} | {same} | " + " | ".join(str(counts[v]) for v in kinds) + " |")
    lines += ["", "| category | cases | magpy wrong | dynamo wrong |", "|---|---|---|---|"]
    by_cat: dict[str, list[str]] = collections.defaultdict(list)
    for c in cases:
        by_cat[c.category].append(c.name)
    for cat, names in sorted(by_cat.items()):
        bad = [sum(verdicts[k][n][0] is not D.Verdict.SAME for n in names) for k in compilers]  # type: ignore[index,attr-defined]
        lines.append(f"| {cat} | {len(names)} | {bad[0]} | {bad[1]} |")
    lines += ["", "cases where a compiler differs from eager:"]
    for c in cases:
        for k in compilers:
            verdict, diffs = verdicts[k][c.name]  # type: ignore[misc]
            if verdict is not D.Verdict.SAME:  # type: ignore[attr-defined]
                first = diffs[0].splitlines()[0][:150] if diffs else ""
                lines.append(f"- {c.category}/{c.name}: {k}: {verdict.value}: {first}")
    text = "\n".join(lines)
    print(text)
    if opts.out:
        Path(opts.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
