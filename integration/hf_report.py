"""Side-by-side report: MagPy vs TorchDynamo on the Hugging Face models (``models/hf.py``)
and the MONAI / ``diffusers`` models (``models/extra.py``).

Run from the repository root with ``transformers`` (and for ``--extra``: ``monai``,
``diffusers``) installed::

    python -m integration.hf_report [model ...]     # the transformers models (default: all)
    python -m integration.hf_report --extra         # the MONAI and diffusers models

For each model (tiny config, random weights, offline): MagPy's graphs and breaks
(``magpy.explain``), whether MagPy's eager-backend output equals eager over 3 fresh calls, and its
records/hits; TorchDynamo's graphs and breaks (``torch._dynamo.explain``, backend "eager") and
whether ``torch.compile(fullgraph=True, backend="eager")`` succeeds; and the share of MagPy's
run time outside compiled graphs over those calls (``magpy.stats(fn).outside_share``; the calls
that record segments count too) and the places no record could start from
(``stats().eager_sites``: their code always runs uncompiled). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch

import magpy

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from .models.extra import EXTRA_MODELS, EXTRA_OUTPUTS
from .models.hf import HF_MODELS, HF_OUTPUTS

MODELS = {**HF_MODELS, **EXTRA_MODELS}
OUTPUTS = {**HF_OUTPUTS, **EXTRA_OUTPUTS}

__all__ = ["main", "row"]

BATCH, CALLS = 2, 3


def _cache_tensors(cache: Any) -> list[Any]:
    """A cache's tensors: keys and values (a state-space layer's conv and recurrent states) of
    its layers; an encoder-decoder cache's two caches."""
    if hasattr(cache, "cross_attention_cache"):
        caches = (cache.self_attention_cache, cache.cross_attention_cache)
        return [t for c in caches for t in _cache_tensors(c)]
    out = []
    for layer in cache.layers:
        if hasattr(layer, "recurrent_states"):
            out += [*layer.conv_states.values(), *layer.recurrent_states.values()]
        else:
            out += [layer.keys, layer.values]
    return out


def _close(a: Any, b: Any) -> bool:
    if hasattr(a, "layers") or hasattr(a, "cross_attention_cache"):  # a cache
        a, b = _cache_tensors(a), _cache_tensors(b)
        return len(a) == len(b) and all(map(_close, a, b))
    return bool(torch.allclose(a, b, rtol=1e-4, atol=1e-5))


def _same(got: Any, want: Any, fields: tuple[str, ...]) -> bool:
    """Equal outputs: the same type and close ``fields`` (none: the outputs are tensors)."""
    if not fields:
        return type(got) is type(want) and _close(got, want)
    return type(got) is type(want) and all(
        type(getattr(got, f)) is type(getattr(want, f))
        and _close(getattr(got, f), getattr(want, f))
        for f in fields
    )


def _magpy(name: str, model: torch.nn.Module, make: Callable[..., Any]) -> dict[str, Any]:
    magpy.reset()
    reference = copy.deepcopy(model)
    explained = magpy.explain(model)(**make(BATCH, 0))
    compiled = magpy.compile(model, backend="eager")
    same = True
    for i in range(CALLS):
        kwargs = make(BATCH, 1 + i)
        torch.manual_seed(i)
        got = compiled(**kwargs)
        torch.manual_seed(i)
        same = same and _same(got, reference(**kwargs), OUTPUTS[name])
    st = magpy.stats(compiled)
    return {
        "graphs": explained.graph_count,
        "breaks": explained.graph_break_count,
        "same": same,
        "records": st.records,
        "hits": st.hits,
        "outside": st.outside_share,
        "eager_sites": st.eager_sites,
    }


def _dynamo(model: torch.nn.Module, make: Callable[..., Any]) -> dict[str, Any]:
    import torch._dynamo as dynamo

    dynamo.reset()
    try:
        out = dynamo.explain(model)(**make(BATCH, 0))
        graphs, breaks = out.graph_count, out.graph_break_count
    except Exception as exc:  # report, do not stop the table
        graphs, breaks = "error", type(exc).__name__
    dynamo.reset()
    try:
        torch.compile(model, backend="eager", fullgraph=True)(**make(BATCH, 1))
        full = "yes"
    except Exception as exc:
        full = f"no ({type(exc).__name__})"
    dynamo.reset()
    return {"graphs": graphs, "breaks": breaks, "fullgraph": full}


def row(name: str) -> str:
    """One Markdown table row for model ``name``."""
    model, make = MODELS[name]()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            mp = _magpy(name, model, make)
            mp_text = (
                f"{mp['graphs']} | {mp['breaks']} | {'yes' if mp['same'] else 'NO'} | "
                f"{mp['records']}/{mp['hits']} | {mp['outside']:.0%} | {mp['eager_sites']}"
            )
        except Exception as exc:
            mp_text = f"error | {type(exc).__name__} | - | - | - | -"
        model, make = MODELS[name]()
        dy = _dynamo(model, make)
    return f"| {name} | {mp_text} | {dy['graphs']} | {dy['breaks']} | {dy['fullgraph']} |"


def main(argv: list[str] | None = None) -> int:
    """Print the table for the named models (default: all transformers ones; ``--extra``: all
    MONAI and diffusers ones)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help=f"some of: {' '.join(MODELS)}")
    parser.add_argument(
        "--extra", action="store_true", help="the MONAI and diffusers models (with names: added)"
    )
    args = parser.parse_args(argv)
    unknown = set(args.models) - set(MODELS)
    if unknown:
        parser.error(f"unknown models: {sorted(unknown)}")
    names = args.models or ([] if args.extra else list(HF_MODELS))
    if args.extra:
        names += [n for n in EXTRA_MODELS if n not in names]
    print("| model | MagPy graphs | MagPy breaks | MagPy = eager | records/hits |", end="")
    print(" time outside graphs | eager sites | Dynamo graphs | Dynamo breaks | fullgraph=True |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        print(row(name), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
