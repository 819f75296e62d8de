"""What a loop (or branch) node is made of, for pictures and traces: its bodies and how they connect.

Any op whose registration lists ``bodies`` holds subgraphs. Its lowering's ``wiring(node)`` says how the
node's inputs feed the bodies' placeholders, which body outputs come back as the next iteration's carries
and which become the node's values (read by ``loop_output`` nodes). An op whose lowering has no ``wiring``
is connected by position: a body taking as many inputs as the node has is fed them in order, and the
node's other inputs and its values meet the cluster at one node named after the op.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ops.registry import REGISTRY
from ..tensor import LEAVES


@dataclass
class Wiring:
    """How one loop node connects. ``feeds``: (node input, body attribute, body input, kind), kind
    "carry" (the carry's first value), "slice" (one slice per step) or "read" (every step reads it).
    ``carries``: (body attribute, body output, body attribute, body input) that output becomes next
    iteration. ``values``: (node value index, body attribute, body output, kind "final" or "stacked")."""

    feeds: list = field(default_factory=list)
    carries: list = field(default_factory=list)
    values: list = field(default_factory=list)
    title: str = ""


def body_attrs(node) -> tuple:
    """The attributes of ``node`` holding bodies (empty for an ordinary op)."""
    opdef = REGISTRY.get(node.op)
    if opdef is None or not opdef.bodies:
        return ()
    return tuple(a for a in opdef.bodies if a in node.attrs)


def is_loop(node) -> bool:
    return bool(body_attrs(node))


def body_graphs(node) -> dict:
    """{attribute: the body's IR graph}."""
    return {attr: node.attrs[attr].graph for attr in body_attrs(node)}


def wiring_of(node) -> Wiring:
    lowering = getattr(REGISTRY.get(node.op), "lowering", None)
    described = getattr(lowering, "wiring", None)
    if described is not None:
        w = described(node)
        return Wiring(list(w["feeds"]), list(w["carries"]), list(w["values"]), w.get("title", ""))
    feeds = []
    for attr, graph in body_graphs(node).items():
        if len(graph.inputs) == len(node.inputs):
            feeds += [(k, attr, k, "read") for k in range(len(node.inputs))]
    return Wiring(feeds)


def value_count(node) -> int:
    """How many values the node makes (what its ``loop_output`` s may read)."""
    lowering = getattr(REGISTRY.get(node.op), "lowering", None)
    return len(lowering.values(node)) if lowering is not None else 0


def op_count(graph) -> int:
    """The ops a body runs per iteration (its placeholders and constants are not counted)."""
    return sum(1 for n in graph.nodes.values() if n.op not in LEAVES)


def title_of(node) -> str:
    """"scan (5 steps, reverse)": the op with what its wiring says of it."""
    title = wiring_of(node).title
    return f"{node.op} ({title})" if title else node.op


def input_roles(node) -> dict:
    """{(attribute, body input): "carry h0" / "slice X" / "read Wx"}: what feeds each body placeholder,
    named after the body's own placeholder."""
    graphs = body_graphs(node)
    roles = {}
    for _, attr, k, kind in wiring_of(node).feeds:
        graph = graphs[attr]
        if k < len(graph.inputs):
            roles[(attr, k)] = f"{kind} {graph.nodes[graph.inputs[k]].label()}"
    return roles
