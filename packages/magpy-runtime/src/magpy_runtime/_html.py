"""The HTML report of ``magpy explain --report DIR`` and ``ExplainOutput.save(DIR)``.

One self-contained ``index.html``: inline CSS, no script, nothing fetched. Per explanation:
a summary, the graph breaks (``file:line``, the source line, the reason), the function's
source with the break lines marked, each graph's ops and code, each record's guard and mock,
the assumed values, and the RefGraph of the last record as a picture: rendered to SVG by
Graphviz's ``dot`` where it is on PATH, else given as DOT text with how to install Graphviz.
Every text from the program or from MagPy goes through ``html.escape``.

The DOT comes from the RefGraph's text dump (``magpy_refgraph.dump``, the form
``CacheState.last_refgraph`` keeps): the same nodes, versions and edges that
``magpy_refgraph.to_dot`` draws from the graph itself.
"""

from __future__ import annotations

import html
import inspect
import linecache
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["DOT_TIMEOUT", "dot_from_dump", "render_report", "svg_of", "write_report"]

DOT_TIMEOUT = 30.0  # seconds Graphviz may take to lay out one RefGraph
WHOLE_FILE_LINES = 400  # a source file up to this long is shown whole, else the function
INSTALL_HINT = (
    "Install Graphviz to see this graph as a picture (apt install graphviz, brew install "
    "graphviz or conda install graphviz; the report runs its dot command), or paste the "
    "DOT text into any Graphviz viewer."
)

# what the report shows of the source: (file name, first line number, the lines)
SourceView = tuple[str, int, list[str]]

_CSS = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222;
  padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { border-bottom: 2px solid #ddd; margin-top: 2em; }
code, pre, .src td { font: 13px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; }
pre { background: #f6f8fa; padding: .7em 1em; overflow-x: auto; border-radius: 4px; }
.summary span { display: inline-block; margin-right: 1.2em; padding: .2em .6em;
  background: #eef; border-radius: 4px; }
.summary .bad { background: #fdd; }
table.src { border-collapse: collapse; width: 100%; background: #fafafa; }
.src td { padding: 0 .6em; white-space: pre; vertical-align: top; }
.src td.ln { color: #999; text-align: right; user-select: none; width: 4em; }
.src tr.brk { background: #ffe0e0; } .src tr.brk td.ln { color: #c00; font-weight: bold; }
.src tr.assume { background: #fff5cc; }
.src .why { white-space: normal; color: #a00; font: italic 13px system-ui, sans-serif; }
.src tr.assume .why { color: #850; }
ol.ops li { display: inline-block; margin: .15em; padding: .05em .45em; background: #e8f0fe;
  border-radius: 3px; font-family: ui-monospace, monospace; font-size: 13px; }
ol.ops { padding-left: 0; }
.note { color: #555; } .hint { background: #fff5cc; padding: .5em 1em; }
details > summary { cursor: pointer; color: #036; }
.refgraph svg { max-width: 100%; height: auto; }
"""


def write_report(directory: Path, outputs: Sequence[Any], title: str = "") -> Path:
    """Write ``directory/index.html`` for ``outputs`` (``ExplainOutput``s); return its path."""
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"report directory {str(directory)!r} is a file")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "index.html"
    path.write_text(render_report(outputs, title), encoding="utf-8")
    return path


def render_report(outputs: Sequence[Any], title: str = "") -> str:
    """The HTML page of ``outputs`` (one section each)."""
    title = title or "magpy explain: " + ", ".join(o.qualname or "?" for o in outputs)
    body = [f"<h1>{_e(title)}</h1>"]
    if not outputs:
        body.append('<p class="note">Nothing was compiled, so there is nothing to explain.</p>')
    for i, out in enumerate(outputs):
        body.append(_explanation(out, f"e{i + 1}", len(outputs) > 1))
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _explanation(out: Any, prefix: str, heading: bool) -> str:
    parts = [f'<section id="{prefix}">']
    if heading:
        parts.append(f"<h2>{_e(out.qualname)}</h2>")
    view = _source_lines(out.function)
    parts.append(_summary(out))
    parts.append(_breaks(out, prefix, view))
    parts.append(_source(out, prefix, view))
    parts.append(_graphs(out, prefix))
    parts.append(_records(out, prefix))
    if out.assumptions:
        items = "".join(f"<li><code>{_e(a)}</code></li>" for a in out.assumptions)
        parts.append(f"<h3>Assumed values (checked after each graph run)</h3><ol>{items}</ol>")
    parts.append(_refgraph(out, prefix))
    parts.append("</section>")
    return "\n".join(parts)


def _summary(out: Any) -> str:
    bad = ' class="bad"' if out.graph_break_count else ""
    items = [
        f"<span>{out.graph_count} graph{'s' * (out.graph_count != 1)}</span>",
        f"<span{bad}>{out.graph_break_count} graph "
        f"break{'s' * (out.graph_break_count != 1)}</span>",
        f"<span>{out.op_count} ops</span>",
        f"<span>{len(out.records)} record{'s' * (len(out.records) != 1)}</span>",
    ]
    if out.outside_share is not None:
        items.append(f"<span>{out.outside_share:.0%} of the run time outside graphs</span>")
    text = f'<p class="summary">{"".join(items)}</p>'
    if out.outside_note:
        text += f'<p class="note">Time outside compiled graphs: {_e(out.outside_note)}</p>'
    return text


def _shown(view: SourceView | str, filename: str | None, lineno: int | None) -> bool:
    """Whether the source ``view`` shows line ``lineno`` of ``filename``."""
    if isinstance(view, str) or filename != view[0] or lineno is None:
        return False
    return view[1] <= lineno < view[1] + len(view[2])


def _breaks(out: Any, prefix: str, view: SourceView | str) -> str:
    if not out.break_reasons:
        return "<h3>Graph breaks</h3><p>None: the call was captured without a break.</p>"
    items = []
    for r, times in Counter(out.break_reasons).items():
        where = f"{r.filename}:{r.lineno}" if r.filename else "(no source location)"
        again = f" (met {times} times)" if times > 1 else ""
        line = linecache.getline(r.filename, r.lineno).rstrip() if r.filename and r.lineno else ""
        code = f"<pre>{r.lineno:>5} | {_e(line)}</pre>" if line.strip() else ""
        shown = _shown(view, r.filename, r.lineno)
        link = f' (<a href="#{prefix}-L{r.lineno}">in the source</a>)' if shown else ""
        items.append(f"<li><code>{_e(where)}</code>{link}: {_e(r.reason)}{again}{code}</li>")
    return f"<h3>Graph breaks</h3><ol>{''.join(items)}</ol>"


def _source_lines(function: Any) -> SourceView | str:
    """(file name, first line number, lines) of what to show of ``function``'s source, or
    why there is none."""
    if function is None:
        return "the call entered no Python function MagPy could show"
    try:
        filename = inspect.getsourcefile(function)
        lines, first = inspect.getsourcelines(function)
    except (OSError, TypeError) as exc:
        return f"the source of {function.__qualname__} is not available ({exc})"
    if filename is None:
        return f"the source file of {function.__qualname__} is not known"
    whole = linecache.getlines(filename)
    if whole and len(whole) <= WHOLE_FILE_LINES:
        return filename, 1, whole
    return filename, max(first, 1), lines


def _source(out: Any, prefix: str, view: SourceView | str) -> str:
    if isinstance(view, str):
        return f'<h3>Source</h3><p class="note">Not shown: {_e(view)}.</p>'
    filename, first, lines = view
    marks: dict[int, list[tuple[str, str]]] = {}
    for r in dict.fromkeys(out.break_reasons):
        if r.filename == filename and r.lineno is not None:
            marks.setdefault(r.lineno, []).append(("brk", f"graph break: {r.reason}"))
    for a in out.assumptions:
        where = a.split(" (", 1)[0]
        file, _, line = where.rpartition(":")
        if file == filename and line.isdigit():
            marks.setdefault(int(line), []).append(("assume", f"assumed value: {a}"))
    rows = []
    for n, text in enumerate(lines, start=first):
        kinds = marks.get(n, [])
        cls = f' class="{kinds[0][0]}"' if kinds else ""
        why = "".join(f'<div class="why">&#8593; {_e(msg)}</div>' for _, msg in kinds)
        rows.append(
            f'<tr id="{prefix}-L{n}"{cls}><td class="ln">{n}</td>'
            f"<td>{_e(text.rstrip())}{why}</td></tr>"
        )
    return (
        f"<h3>Source</h3><p><code>{_e(filename)}</code></p>"
        f'<table class="src">{"".join(rows)}</table>'
    )


def _graph_code(gm: Any) -> str:
    return str(getattr(gm, "code", gm)).strip("\n")


def _graphs(out: Any, prefix: str) -> str:
    if not out.graphs:
        return "<h3>Graphs</h3><p>None: no tensor operations were captured.</p>"
    parts = ["<h3>Graphs</h3>"]
    for i, gm in enumerate(out.graphs):
        ops = out.ops_per_graph[i] if i < len(out.ops_per_graph) else []
        items = "".join(f"<li>{_e(op)}</li>" for op in ops)
        parts.append(
            f'<h4 id="{prefix}-graph{i + 1}">Graph {i + 1}: {len(ops)} ops</h4>'
            f'<ol class="ops">{items}</ol>'
            f"<details open><summary>code</summary><pre>{_e(_graph_code(gm))}</pre></details>"
        )
    return "\n".join(parts)


def _records(out: Any, prefix: str) -> str:
    if not out.records:
        return "<h3>Records</h3><p>None.</p>"
    number = {id(gm): i + 1 for i, gm in enumerate(out.graphs)}
    parts = ["<h3>Records</h3>"]
    for i, rec in enumerate(out.records):
        gm = rec.graph_module
        graph = (
            f'runs <a href="#{prefix}-graph{number[id(gm)]}">Graph {number[id(gm)]}</a>'
            if gm is not None and id(gm) in number
            else "runs no graph"
        )
        parts.append(
            f"<h4>Record {i + 1} ({graph})</h4>"
            f"<details open><summary>guard</summary><pre>{_e(rec.guard_source)}</pre></details>"
            f"<details><summary>mock</summary><pre>{_e(rec.mock_source)}</pre></details>"
        )
    return "\n".join(parts)


def _refgraph(out: Any, prefix: str) -> str:
    head = f'<h3 id="{prefix}-refgraph">RefGraph of the last record</h3>'
    if not out.refgraph:
        return head + "<p>None: no record was made.</p>"
    dot = dot_from_dump(out.refgraph)
    svg, why = svg_of(dot)
    dump = f"<details><summary>as text</summary><pre>{_e(out.refgraph)}</pre></details>"
    if svg is not None:
        return f'{head}<div class="refgraph">{svg}</div>{dump}'
    return (
        f'{head}<p class="hint">{_e(why)} {_e(INSTALL_HINT)}</p>'
        f'<pre class="dot">{_e(dot)}</pre>{dump}'
    )


def svg_of(dot: str) -> tuple[str | None, str]:
    """``dot`` rendered by Graphviz as an inline ``<svg>`` element, or (None, why not)."""
    exe = shutil.which("dot")
    if exe is None:
        return None, "Graphviz's dot command is not on PATH."
    try:
        done = subprocess.run(
            [exe, "-Tsvg"],
            input=dot,
            capture_output=True,
            text=True,
            timeout=DOT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"Running {exe} failed ({exc})."
    start = done.stdout.find("<svg")
    if done.returncode != 0 or start < 0:
        err = done.stderr.strip().splitlines()
        return None, f"{exe} failed (exit {done.returncode}: {err[-1] if err else 'no SVG'})."
    return done.stdout[start:].strip(), ""


# ---------------------------------------------------------------------- dump -> DOT
_HEAD = re.compile(r"SN#(\d+) (\S+)( ext)?(?: (.*))?$")
_EDGE = re.compile(r"  v(\d+) --(.*)--> SN#(\d+) \[([^\]]*)\]$")
_VERSION = re.compile(r"  v(\d+) (.*)$")
_RECORD_SPECIAL = str.maketrans(
    {c: "\\" + c for c in '\\"{}|<> '} | {"\t": "\\ ", "\r": " ", "\n": " "}
)


def _field(text: str) -> str:
    return text.translate(_RECORD_SPECIAL)


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def dot_from_dump(text: str) -> str:
    """Graphviz DOT of a RefGraph from its text dump (``magpy_refgraph.dump``), drawn as
    ``magpy_refgraph.to_dot`` draws the graph: a record per node listing its versions, the
    edges from the version that added them (created bold, read solid, others dashed), SN#0
    gold, external nodes blue."""
    nodes: list[tuple[int, bool, list[str]]] = []  # (id, external, label fields)
    edges: list[str] = []
    kinds: dict[int, list[str]] = {}
    for line in text.splitlines():
        if (head := _HEAD.match(line)) is not None and not line.startswith(" "):
            nid = int(head.group(1))
            nodes.append((nid, bool(head.group(3)), [_field(line)]))
            kinds[nid] = []
        elif not nodes:
            continue
        elif line.startswith("  observed "):
            kind = line.split()[1]
            if kind not in kinds[nodes[-1][0]]:
                kinds[nodes[-1][0]].append(kind)
        elif (edge := _EDGE.match(line)) is not None:
            v, access, dst, flags = edge.groups()
            style = "bold" if "created" in flags else "solid" if "read" in flags else "dashed"
            label = _quoted(f"v{v}: {access}")
            edges.append(f'  n{nodes[-1][0]}:v{v} -> n{dst} [label="{label}", style={style}];')
        elif (version := _VERSION.match(line)) is not None and version.group(2)[:1] not in "(-":
            v, rest = version.groups()
            nodes[-1][2].append(f"<v{v}> " + _field(f"v{v}: {rest}"))
    lines = [
        "digraph RefGraph {",
        "  graph [rankdir=LR];",
        '  node [shape=record, fontname="monospace", fontsize=10];',
        '  edge [fontname="monospace", fontsize=9];',
    ]
    for nid, external, fields in nodes:
        if kinds[nid]:
            fields.insert(1, _field("observed: " + ", ".join(kinds[nid])))
        color = "gold" if nid == 0 else "lightblue" if external else "white"
        lines.append(
            f'  n{nid} [label="{{{"|".join(fields)}}}", style=filled, fillcolor="{color}"];'
        )
    return "\n".join([*lines, *edges, "}"]) + "\n"
