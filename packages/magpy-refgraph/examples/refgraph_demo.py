"""Build a small RefGraph by hand and show everything the refgraph layer derives from it.

The "program" being modelled (no torch needed; FakeTensor stands in for a tensor)::

    def forward(self, w):
        act = CFG["act"]                  # global read, its value observed
        y = self.layers[2].weight * 2     # weight is the same object as the argument w
        self.last = y                     # attribute written: a mock must redo it
        return y

Run: ``python refgraph_demo.py [out.dot]`` (needs only the magpy-refgraph package).
"""

from __future__ import annotations

import sys

from magpy_refgraph import (
    Attr,
    Global,
    GuardKind,
    Item,
    Local,
    NodeKind,
    RefGraph,
    SimpleRenderContext,
    aliases,
    dump,
    guard_requirements,
    mock_set,
    render_path,
    to_dot,
)


class FakeTensor:
    """Stands in for a tensor: only identity and a shape matter here."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def __repr__(self) -> str:
        return f"FakeTensor{self.shape}"


class Layer:
    """A module-like object holding a weight."""

    def __init__(self, weight: FakeTensor) -> None:
        self.weight = weight

    def __repr__(self) -> str:
        return "Layer"


class Model:
    """A module-like object holding a list of layers."""

    def __init__(self, layers: list[Layer]) -> None:
        self.layers = layers


def build() -> tuple[RefGraph, dict[str, object], dict[str, object]]:
    """Record the reads, observations and writes of ``forward`` on real stand-in objects."""
    weight = FakeTensor((4, 4))
    model = Model([Layer(FakeTensor((4, 4))), Layer(FakeTensor((4, 4))), Layer(weight)])
    frame_locals: dict[str, object] = {"self": model, "w": weight}
    frame_globals: dict[str, object] = {"CFG": {"act": "relu", "depth": 3}}

    g = RefGraph()
    self_n = g.new_node(NodeKind.MODULE, external=True, label="self")
    w_n = g.new_node(NodeKind.TENSOR, external=True, label="w")
    cfg_n = g.new_node(NodeKind.DICT, external=True, label="CFG")
    act_n = g.new_node(NodeKind.STRING, external=True, label="act")
    layers_n = g.new_node(NodeKind.LIST, external=True, label="self.layers")
    layer2_n = g.new_node(NodeKind.MODULE, external=True, label="self.layers[2]")

    g.read(g.root, Local("self"), self_n)  # arguments first, as a frame would bind them
    g.read(g.root, Local("w"), w_n)
    g.read(g.root, Global("CFG"), cfg_n)  # act = CFG["act"]
    g.read(cfg_n, Item("act"), act_n)
    g.observe(cfg_n, GuardKind.TYPE, dict)
    g.observe(act_n, GuardKind.VALUE, "relu")
    g.read(self_n, Attr("layers"), layers_n)  # self.layers[2].weight
    g.read(layers_n, Item(2), layer2_n)
    g.read(layer2_n, Attr("weight"), w_n)  # the same tensor as w: an alias
    g.observe(layers_n, GuardKind.LEN, 3)
    g.observe(w_n, GuardKind.TENSOR_META, ("float32", (4, 4)))

    y_n = g.new_node(NodeKind.TENSOR, external=False, label="y")  # y = weight * 2
    g.write(self_n, Attr("last"), y_n, reason="setattr last")  # self.last = y
    g.verify()
    return g, frame_locals, frame_globals


def main(argv: list[str]) -> int:
    """Print the dump, guards (rendered and checked), aliases and mock set; write DOT if asked."""
    g, frame_locals, frame_globals = build()
    print(dump(g))

    ctx = SimpleRenderContext()
    env = ctx.eval_globals(frame_locals, frame_globals, {})
    print("guard requirements:")
    for req in guard_requirements(g):
        src = render_path(req.path, ctx)
        print(f"  {req.kind.name:<12} {src:<32} payload={req.payload!r}  value={eval(src, env)!r}")

    print("aliases:")
    for primary, other in aliases(g):
        same = eval(render_path(primary, ctx), env) is eval(render_path(other, ctx), env)
        print(f"  {primary}  ==  {other}   (same object: {same})")

    ms = mock_set(g)
    print("mock set:")
    for src_node, access, dst in ms.created:
        print(f"  created  {src_node}{access} = {dst}")
    print(f"  updated  {[str(n) for n in ms.updated]}")
    print(f"  new      {[str(n) for n in ms.new_reachable]}")

    if len(argv) > 1:
        with open(argv[1], "w", encoding="utf-8") as out:
            out.write(to_dot(g))
        print(f"DOT written to {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
