"""Where a picture puts things so that a training step stays readable at 100% zoom.

Graphviz's ``dot`` ranks nodes by their edges and draws each cluster as a rectangle over the ranks its
nodes take, so two things made big graphs sprawl: a small constant shared by many nodes (Adam's 0.999
read by the update of every parameter, a 1 that common subexpression elimination merged across layers)
pulled its readers together and held its cluster open from top to bottom; and the updates of all the
parameters, which hang off their gradients at the same ranks, stood side by side in one wide row.

So a small constant is drawn beside its readers, once in each cluster or collapsed box that reads it; the
update step is drawn in bands, one per layer (the scope of the trained parameters an update node helps
update, see Picture.update_bands), each ranked below the one before by invisible edges; and the gradient
of a parameter the graph updates is ranked below the parameter. A training step then reads as a grid: a row
per layer, holding its forward nodes, its backward nodes and its update band side by side.
"""
from __future__ import annotations

import numpy as np
import pydot

SMALL = 4       # constants of at most this many numbers are labelled with their value and drawn per reader
EDGES_PER_BAND = 256    # invisible edges between two bands at the most (from its deepest ends first)


def is_small_constant(node) -> bool:
    return node.op == "constant" and not node.inputs and node.value is not None and np.size(node.value) <= SMALL


def spread_constants(sheet, constants) -> list:
    """Draw each of ``constants`` beside the nodes ``sheet`` drew that read it: into each box, and a copy in
    each cluster, of its readers. Returns those no drawn node reads (to be placed as any node)."""
    wanted = {c.id for c in constants}
    readers = {}
    for node in sheet.pic.graph.nodes.values():
        for i in node.inputs:
            if i in wanted and node.id in sheet.spots:
                readers.setdefault(i, []).append(node.id)
    alone = []
    for node in constants:
        spots = list(dict.fromkeys(sheet.spots[r] for r in readers.get(node.id, ())))
        if not spots:
            alone.append(node)
            continue
        names = {}
        for k, spot in enumerate(spots):
            if spot[0] == "box":
                # (not counted into the box's roles: a constant merged from another role would move the box)
                sheet.into_box(spot[1], sheet.boxes[spot[1]]["scope"], node)
                names[spot] = spot[1]
            else:
                name = str(node.id) if not names else f"{node.id}_{k}"
                # (styled by its own role: one that common subexpression elimination merged from the
                # forward graph into the backward one still says so)
                names[spot] = sheet.add_node(node, sheet.cluster(spot[1], spot[2]), name)
        sheet.spots[node.id] = spots[0]
        sheet.drawn[node.id] = names[spots[0]]
        sheet.copies[node.id] = names
    return alone


def stack_bands(pic, dot, sheet):
    """Invisible edges that rank each band of the update step below the band before it, from its nodes no
    node of the band reads to each node of the next band that reads none of its own band's, in the order of their
    parameters' updates. (What serves several bands, as Adam's step count, stays beside them: ranked
    above the first, its bias corrections would still reach down beside every band.)"""
    graph, bands = pic.graph, pic.update_bands()
    members = {}
    for i, band in bands.items():
        if band and sheet.drawn.get(i) == str(i) and i not in sheet.copies:
            members.setdefault(band, set()).add(i)
    order = []
    for _, e in graph.updates:
        band = bands.get(e, "")
        if band in members and band not in order:
            order.append(band)
    readers = {}
    for node in graph.nodes.values():
        for j in node.inputs:
            readers.setdefault(j, set()).add(node.id)
    depth = _depths(graph, set().union(*members.values()) if members else set())
    for above, below in zip(order, order[1:]):
        if below.startswith(above + "/") or above.startswith(below + "/"):
            continue        # (a band nested in another reads it: no order to impose)
        ends = sorted((i for i in members[above] if not readers.get(i, set()) & members[above]),
                      key=lambda i: -depth[i])
        starts = [i for i in sorted(members[below]) if not any(j in members[below] for j in graph.nodes[i].inputs)]
        for end in ends[:max(1, EDGES_PER_BAND // max(len(starts), 1))]:
            for i in starts:
                dot.add_edge(pydot.Edge(str(end), str(i), style="invis"))


def level_gradients(pic, dot, sheet):
    """An invisible edge from each parameter the graph updates to its gradient, so the gradient, which the
    backward graph, running back up, leaves free to float to the top, stays level with the layer whose
    parameter it is, and the band of the update that reads it with it."""
    drawn, updated = sheet.drawn, {p for p, _ in pic.graph.updates}
    for steps, _ in pic.sweeps:
        for step in steps:
            p, g = step["node"], step["adjoint"]
            if p in updated and drawn.get(p) == str(p) and drawn.get(g) == str(g):
                dot.add_edge(pydot.Edge(str(p), str(g), style="invis"))


def _depths(graph, ids) -> dict:
    """{id: the longest chain of ``ids`` nodes ending at it}, over the edges among ``ids``."""
    depth = {}
    for start in ids:
        stack = [start]
        while stack:
            i = stack[-1]
            if i in depth:
                stack.pop()
                continue
            todo = [j for j in graph.nodes[i].inputs if j in ids and j not in depth]
            if todo:
                stack.extend(todo)
                continue
            depth[i] = 1 + max((depth[j] for j in graph.nodes[i].inputs if j in ids), default=0)
            stack.pop()
    return depth
