"""Drawing a random value again for the backward pass instead of holding it there from the forward pass.

A draw (an op with ``draws``: dropout's mask) is a pure function of its key's value at the start of the
call, and a key moves on only after the call, so a second draw in the backward pass gives the same bits.
Holding the value costs its bytes from the forward pass to its last backward reader; drawing it again
costs the draw's time (about 5 ns an element for a mask, and 25 us a draw). That trade is the user's
(``Backend(recompute_draws=True)``): measured on eight dropout layers of width 512 in float32, drawing
the masks again took 6.6% off the planned peak at batch 512 and cost 11% more time a step (3.9% and 7%
at batch 4096). Asked for, a plan does it only where its peak is lower so: the peak of a small batch is
often the weight gradients and updates, where held masks are already dead, and then nothing changes.
"""
from __future__ import annotations

from ..graph import Graph, Node
from ..ops.registry import REGISTRY
from .memory import plan_memory


def late_draws(graph, order) -> list:
    """Draws read by forward nodes and again by backward or update nodes (neither returned nor an update)."""
    draw_ops = {name for name, opdef in REGISTRY.items() if opdef.draws is not None}
    nodes = graph.nodes
    kept = set(graph.outputs) | {e for _, e in graph.updates}
    early, late = set(), set()
    for i in order:
        node = nodes[i]
        for j in node.inputs:
            if nodes[j].op in draw_ops:
                (early if node.role == "forward" else late).add(j)
    return sorted((early & late) - kept)


def split(graph, order, shapes, draws):
    """(graph, order, shapes) where each of ``draws`` is drawn again just before its first backward or
    update reader, and those readers read the new draw."""
    nodes, shapes = dict(graph.nodes), _copy(shapes)
    again, new_order, pending = {}, [], set(draws)
    for i in order:
        node = nodes[i]
        if node.role != "forward" and pending.intersection(node.inputs):
            for j in dict.fromkeys(node.inputs):
                if j in pending and j not in again:
                    first = nodes[j]
                    copy = Node(first.op, first.inputs, first.attrs, first.shape, first.dtype, first.name, node.role,
                                source=first.source, scope=first.scope)
                    nodes[copy.id], shapes[copy.id], again[j] = copy, shapes[j], copy.id
                    new_order.append(copy.id)
            nodes[i] = node.copy(inputs=[again.get(j, j) if j in pending else j for j in node.inputs])
        new_order.append(i)
    ordered = {i: nodes[i] for i in new_order}
    ordered.update((i, n) for i, n in nodes.items() if i not in ordered)
    return Graph(ordered, graph.outputs, graph.updates, graph.inputs), new_order, shapes


def _copy(shapes):
    copy = type(shapes)(shapes)
    for extra in ("multi", "bodies"):          # (lower.shapes.Sizes: what a loop's node holds)
        if hasattr(shapes, extra):
            setattr(copy, extra, getattr(shapes, extra))
    return copy


def choose(graph, order, shapes):
    """(graph, order, shapes, {stats}): the backward pass draws its random values again when the plan's
    peak is lower so (``recomputed_draws``, and ``recompute_bytes_saved`` of peak), else all as given."""
    draws = late_draws(graph, order)
    if not draws:
        return graph, order, shapes, {}
    held = plan_memory(graph, order, shapes).peak_planned
    again = split(graph, order, shapes, draws)
    saved = held - plan_memory(again[0], again[1], again[2]).peak_planned
    if saved <= 0:
        return graph, order, shapes, {}
    return (*again, {"recomputed_draws": len(draws), "recompute_bytes_saved": saved})
