"""Checkpointed scans: whole-array work on stacked values done step by step, so that no stack is whole.

``checkpoint=k`` asks a scan for memory over time: its stacked values that only loops read, row by row,
are kept as checkpoints and recomputed (lower/loops.py, loops/checkpoint.py). A value read whole must exist
whole whatever is recomputed, and a loss over every step's output reads the ys whole twice: the loss
itself, then its cotangent, computed over all steps and fed to the reverse loop. These rewrites make such
reads per step, for checkpointed scans only (elsewhere they would trade one vectorized op for T small ones,
for nothing):

- ``reduce``: a sum or mean over every axis of an elementwise function of the scan's ys (and of other
  stacked values of its length) becomes a carry that adds each step's share. The sum's order changes: the
  result may differ in its last bits.
- ``feed``: a slice the scan reads that is an elementwise function of stacked values is computed in the
  body from their rows: the same ops on the same numbers, the same bits.

Each value read whole is then a slice: read row by row (a checkpointed scan's, kept as checkpoints).
"""
from __future__ import annotations

import math

import numpy as np

from ..graph import Graph, Node
from ..ops.registry import ELEMENTWISE, REGISTRY
from .loop_motion import ScanParts, new_node


def reduce(graph, i):
    """Each sum or mean over every axis of an elementwise function of scan ``i``'s ys, read by nothing
    else, becomes a carry of the scan. Returns (graph, how many)."""
    s = ScanParts(graph, i)
    if s.node.attrs.get("checkpoint") is None:
        return graph, 0
    outputs = list(s.bg.outputs)
    rows = _Rows(graph, s, outputs)
    carries, accs, before, totals = list(zip(s.p_carry, s.init)), {}, [], {}
    for r, region, leaves in _reductions(graph, s):
        if not all(rows.can_read(x) for x in leaves):
            continue
        node = graph.nodes[r]
        acc = Node("placeholder", (), None, (), node.dtype, role=node.role, source=node.source, scope=node.scope)
        zero = new_node(node, "constant", (), None, (), node.dtype)
        zero.value = np.zeros((), node.dtype)
        row = rows.copy_region(region, leaves, node)
        axes = tuple(range(len(rows.body_nodes[row].shape)))
        share = _body_node(node, "sum", [row], {"axis": axes, "keepdims": False}, ())
        total = _body_node(node, "add", [acc.id, share.id], {}, ())
        accs[acc.id] = acc
        rows.body_nodes.update({share.id: share, total.id: total})
        carries.append((acc.id, zero.id))
        outputs.insert(len(carries) - 1, total.id)
        before.append(zero)
        totals[r] = len(carries) - 1
    if not totals:
        return graph, 0
    s.bg = Graph(accs | rows.body_nodes, s.bg.outputs, (), s.bg.inputs)       # (the new inputs first)
    new = s.rebuilt(carries, rows.slices, list(zip(s.p_cap, s.caps)), outputs, before=before)
    return _read_totals(new, i, totals), len(totals)


def _reductions(graph, s):
    """[(sum or mean node, its elementwise region, the region's stacked leaves)] over scan ``s``'s ys."""
    readers = graph.consumers()
    ys = [o for k, outs in s.readers.items() if k >= s.C for o in outs]
    found = []
    for r in _reduction_readers(graph, readers, ys):
        node = graph.nodes[r]
        top = graph.nodes[node.inputs[0]]
        if node.op == "mean" and (s.node.attrs["length"] is None or None in top.shape):
            continue            # (its count needs the number of steps: unknown until a call)
        if node.dtype.kind != "f" or top.dtype != node.dtype:
            continue            # (a carry of the reduction's dtype adds each step's share as it does)
        got = _region(graph, readers, top.id, {r})
        if got is not None and set(got[1]) & set(ys):
            found.append((r, *got))
    return found


def _reduction_readers(graph, readers, starts):
    """Sum and mean nodes over every axis, keepdims off, reached from ``starts`` through elementwise ops."""
    seen, stack, found = set(), list(starts), []
    while stack:
        j = stack.pop()
        for r in readers.get(j, ()):
            node = graph.nodes[r]
            if r in seen:
                continue
            seen.add(r)
            axis = node.attrs.get("axis")
            if node.op in ("sum", "mean") and not node.attrs.get("keepdims") and \
                    (axis is None or tuple(axis) == tuple(range(len(graph.nodes[j].shape)))):
                found.append(r)
            elif _elementwise(node):
                stack.append(r)
    return found


def _region(graph, readers, top, exits):
    """(the elementwise nodes computing ``top`` in order, the values of its shape they read), reading
    nothing else but constants of one number, if only ``exits`` read ``top``; else None. ``top`` may be
    such a value itself: then the region is empty. A region node something else reads is computed twice,
    whole for that reader (until a rewrite streams it too) and in the loop."""
    shape = graph.nodes[top].shape
    ends = set(graph.outputs) | {e for _, e in graph.updates}
    if top in ends or not set(readers.get(top, ())) <= set(exits):
        return None
    region = _reachable(graph, top, shape)
    if not region:
        return [], [top]
    leaves = set()
    for j in region:
        for x in graph.nodes[j].inputs:
            node = graph.nodes[x]
            if x not in region and not (node.op == "constant" and np.size(node.value) == 1):
                if node.shape != shape:
                    return None
                leaves.add(x)
    return [j for j in graph.nodes if j in region], sorted(leaves)


def _reachable(graph, top, shape):
    """The elementwise nodes of ``shape`` from which ``top`` is computed through elementwise nodes."""
    found, stack = set(), [top]
    while stack:
        j = stack.pop()
        node = graph.nodes[j]
        if j in found or not _elementwise(node) or node.shape != shape:
            continue
        found.add(j)
        stack.extend(node.inputs)
    return found


class _Rows:
    """A scan's body being given rows of outer stacked values: its own ys (the body value each step
    stacks), the values its slices are (their placeholders), and others as new slices."""

    def __init__(self, graph, s, outputs):
        self.graph, self.s = graph, s
        self.body_nodes = dict(s.bg.nodes)
        self.slices = list(zip(s.p_x, s.xs))
        self.of = {}        # value key -> body id of its row
        self.position = None
        for k, outs in s.readers.items():
            if k >= s.C:
                self.of.update((_value_key(graph.nodes[o]), outputs[k]) for o in outs)
        for p, x in self.slices:
            self.of.setdefault(_value_key(graph.nodes[x]), p)

    def can_read(self, x) -> bool:
        """Whether row t of ``x`` is known to be step t's: one of the above, or a value made before the scan
        (it becomes a slice) whose first axis is the scan's known length."""
        if _value_key(self.graph.nodes[x]) in self.of:
            return True
        if self.position is None:
            self.position = {j: k for k, j in enumerate(self.graph.nodes)}
        if self.position[x] > self.position[self.s.i]:
            return False
        shape, length = self.graph.nodes[x].shape, self.s.node.attrs["length"]
        return (length is not None and shape[:1] == (length,)) or self._stacked_alike(self.graph.nodes[x])

    def _stacked_alike(self, node) -> bool:
        """Whether ``node`` is a stacked value of a scan that takes one of this scan's slices (a loop and
        the reverse loop of its gradient): then its rows are this scan's steps, whatever their number."""
        if node.op != "loop_output":
            return False
        loop = self.graph.nodes[node.inputs[0]]
        if loop.op != "scan" or node.attrs["index"] < loop.attrs["n_carry"]:
            return False
        C = loop.attrs["n_carry"]
        return not set(loop.inputs[C:C + loop.attrs["n_xs"]]).isdisjoint(self.s.xs)

    def row(self, x):
        key = _value_key(self.graph.nodes[x])
        if key not in self.of:
            node = self.graph.nodes[x]
            p = Node("placeholder", (), None, node.shape[1:], node.dtype, role=node.role, source=node.source,
                     scope=node.scope)
            self.body_nodes[p.id] = p
            self.slices.append((p.id, x))
            self.of[key] = p.id
        return self.of[key]

    def copy_region(self, region, leaves, like):
        """Copy ``region`` into the body on the rows of ``leaves``; the body id of its last node (of the row
        itself, for no region)."""
        made = {x: self.row(x) for x in leaves}
        if not region:
            return made[leaves[0]]
        for j in region:
            node = self.graph.nodes[j]
            ins = []
            for x in node.inputs:
                if x not in made:
                    outer = self.graph.nodes[x]          # (a constant of one number: a number in the body)
                    c = _body_node(like, "constant", (), None, ())
                    c.value, c.dtype = np.asarray(outer.value).reshape(()), outer.dtype
                    self.body_nodes[c.id] = c
                    made[x] = c.id
                ins.append(made[x])
            copy = Node(node.op, ins, node.attrs, node.shape[1:], node.dtype, role=node.role, source=node.source,
                        scope=node.scope, rule=node.rule)
            self.body_nodes[copy.id] = copy
            made[j] = copy.id
        return made[region[-1]]


def _value_key(node):
    """Loop outputs of one loop and index are one value (CSE has not merged them yet)."""
    return (node.inputs[0], node.attrs["index"]) if node.op == "loop_output" else node.id


def _elementwise(node) -> bool:
    opdef = REGISTRY.get(node.op)       # (None for a leaf)
    return opdef is not None and node.op != "constant" and opdef.has(ELEMENTWISE)


def _body_node(like, op, inputs, attrs, shape):
    return Node(op, inputs, attrs, shape, like.dtype, role=like.role, source=like.source, scope=like.scope)


def _read_totals(graph, i, totals):
    """``graph`` with each reduction in ``totals`` ({node id: the carry holding it}) read from its carry:
    the carry itself for a sum, divided by the number of elements for a mean (as numpy's mean divides)."""
    nodes = {}
    for j, node in graph.nodes.items():
        if j not in totals:
            nodes[j] = node
            continue
        value = graph.nodes[node.inputs[0]]
        out = new_node(node, "loop_output", [i], {"index": totals[j], "shape": (), "dtype": node.dtype}, ())
        nodes[out.id] = out
        if node.op == "sum":
            nodes[j] = node.copy(op="reshape", inputs=[out.id], attrs={"shape": ()})
            continue
        count = new_node(node, "constant", (), None, ())
        count.value = np.asarray(math.prod(value.shape), node.dtype)
        nodes[count.id] = count
        nodes[j] = node.copy(op="div", inputs=[out.id, count.id], attrs={})
    return Graph(nodes, graph.outputs, graph.updates, graph.inputs)


def feed(graph, i):
    """Each slice scan ``i`` reads that is an elementwise function of stacked values, read by nothing else,
    is computed in the body from their rows. Returns (graph, how many)."""
    s = ScanParts(graph, i)
    if s.node.attrs.get("checkpoint") is None:
        return graph, 0
    readers = graph.consumers()
    order = list(s.bg.nodes)
    rows = _Rows(graph, s, list(s.bg.outputs))
    replaced = {}
    for p, o in zip(s.p_x, s.xs):
        got = _region(graph, readers, o, {i}) if list(s.node.inputs).count(o) == 1 else None
        if not got or not got[0] or not all(rows.can_read(x) for x in got[1]):
            continue
        region, leaves = got
        replaced[p] = rows.copy_region(region, leaves, graph.nodes[o])
        rows.slices = [(q, x) for q, x in rows.slices if q != p]
    if not replaced:
        return graph, 0
    s.bg = _rewired(rows.body_nodes, order, s.bg, replaced)
    return s.rebuilt(list(zip(s.p_carry, s.init)), rows.slices, list(zip(s.p_cap, s.caps)),
                     list(s.bg.outputs)), len(replaced)


def _rewired(body_nodes, order, bg, replaced):
    """The body with readers of each replaced slice placeholder reading its new value, the new nodes placed
    after the body's inputs (they read only those and constants)."""
    new_ids = [j for j in body_nodes if j not in bg.nodes]
    leaves = [j for j in order if not bg.nodes[j].inputs]
    rest = [j for j in order if bg.nodes[j].inputs]
    nodes = {}
    for j in leaves + new_ids + rest:
        node = body_nodes[j]
        if any(x in replaced for x in node.inputs):
            node = node.copy(inputs=[replaced.get(x, x) for x in node.inputs])
        nodes[j] = node
    outputs = [replaced.get(x, x) for x in bg.outputs]
    return Graph(nodes, outputs, (), bg.inputs)
