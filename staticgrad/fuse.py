"""Elementwise regions: runs of scheduled nodes that one loop over the elements can compute together.

numpy pays a full pass over memory and a call's fixed cost per op; a region computes all its ops for one
element before moving to the next, keeping intermediates in registers. Backends that can compile loops
(``backend="numba"``) turn each region into one kernel.
"""
from __future__ import annotations

import math

import numpy as np

from . import scalar_math

# One scalar expression per op, over the operands' scalar values {0}, {1}, {2}.
SCALAR = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "neg": "(-{0})", "pow": "({0} ** {1})", "exp": "math.exp({0})", "log": "math.log({0})",
    "log1p": "math.log1p({0})", "expm1": "math.expm1({0})", "sqrt": "math.sqrt({0})",
    "sin": "math.sin({0})", "cos": "math.cos({0})", "tanh": "math.tanh({0})", "abs": "abs({0})",
    "square": "({0} * {0})", "sigmoid": "sigmoid({0})", "softplus": "softplus({0})",
    "relu": "maximum({0}, 0.0)", "maximum": "maximum({0}, {1})", "minimum": "minimum({0}, {1})",
    "sign": "sign({0})", "where": "({1} if {0} else {2})", "clip": "minimum(maximum({0}, {1}), {2})",
    "less": "({0} < {1})", "less_equal": "({0} <= {1})", "greater": "({0} > {1})",
    "greater_equal": "({0} >= {1})", "equal": "({0} == {1})", "not_equal": "({0} != {1})",
    "stop_gradient": "{0}",
}
MAX_REGION = 1200       # nodes per kernel: compile time of one loop body grows faster than linearly


class Region:
    """Consecutive scheduled nodes of one shape, computed by one loop."""

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.nodes = []            # node ids in schedule order
        self.inputs = []           # ids of values read from outside (arrays of the region's shape, or size 1)
        self.outputs = []          # ids of region nodes that something outside reads


def _fusible(node, shapes, nodes):
    if node.op not in SCALAR or node.dtype.kind not in "fb" or node.dtype.itemsize > 8:
        return False
    shape = shapes[node.id]
    if math.prod(shape) == 0:
        return False
    for i in node.inputs:
        s = shapes[i]
        if tuple(s) != tuple(shape) and math.prod(s) != 1:
            return False       # only same-shaped operands or scalars: one flat index serves all
        if nodes[i].dtype.kind not in "fb":
            return False
    return True


def find_regions(graph, order, shapes, min_nodes=2):
    """Regions of fusible nodes with equal shapes, and the schedule that keeps each region contiguous.

    A node that cannot be fused does not end the current region unless a later member needs its value:
    it is moved to just after the region (a forward loss reduction, say, then no longer splits the
    forward from the backward loop, and the values saved for the backward never leave registers).
    Returns (regions with at least ``min_nodes`` nodes, new order).
    """
    nodes = graph.nodes
    regions, current, deferred, blocked, new_order = [], None, [], set(), []

    def close():
        nonlocal current, deferred, blocked
        if current is not None:
            regions.append(current)
            new_order.extend(current.nodes)
        new_order.extend(deferred)
        current, deferred, blocked = None, [], set()

    for i in order:
        node = nodes[i]
        if node.op in ("placeholder", "parameter", "constant"):
            new_order.append(i)
            continue
        if _fusible(node, shapes, nodes) and not any(j in blocked for j in node.inputs):
            if current is not None and (current.shape != tuple(shapes[i]) or len(current.nodes) >= MAX_REGION):
                close()
            if current is None:
                current = Region(shapes[i])
            current.nodes.append(i)
            continue
        if current is not None and not any(j in blocked for j in node.inputs) and not _fusible(node, shapes, nodes):
            deferred.append(i)          # runs after the region; members after this point must not need it
            blocked.add(i)
            continue
        close()
        if _fusible(node, shapes, nodes):
            current = Region(shapes[i])
            current.nodes.append(i)
        else:
            new_order.append(i)
    close()
    regions = [r for r in regions if len(r.nodes) >= min_nodes]
    _connect(graph, regions)
    return regions, new_order


def _connect(graph, regions):
    """Fill each region's inputs (read from outside) and outputs (read outside, or returned)."""
    escaping = set(graph.outputs) | {e for _, e in graph.updates}
    readers = {}
    for node in graph.nodes.values():
        for j in node.inputs:
            readers.setdefault(j, set()).add(node.id)
    for r in regions:
        inside = set(r.nodes)
        seen = set()
        for i in r.nodes:
            for j in graph.nodes[i].inputs:
                if j not in inside and j not in seen:
                    seen.add(j)
                    r.inputs.append(j)
        r.outputs = [i for i in r.nodes if i in escaping or any(k not in inside for k in readers.get(i, ()))]


def kernel_source(graph, region, shapes, name="kernel") -> str:
    """Python source of one loop computing ``region`` (compiled by numba)."""
    nodes = graph.nodes
    args = [f"in{k}" for k in range(len(region.inputs))]
    n = math.prod(region.shape)
    lines = [f"def {name}({', '.join(args)}):"]
    local = {}
    for k, j in enumerate(region.inputs):
        if math.prod(shapes[j]) == 1 and tuple(shapes[j]) != region.shape:
            lines.append(f"    s{k} = np.ascontiguousarray(in{k}).reshape(-1)[0]")       # a scalar, read once
            local[j] = f"s{k}"
        else:
            lines.append(f"    f{k} = np.ascontiguousarray(in{k}).reshape({n})")
            local[j] = f"f{k}[i]"
    for k, i in enumerate(region.outputs):
        dtype = "bool_" if nodes[i].dtype.kind == "b" else nodes[i].dtype.name
        lines.append(f"    out{k} = np.empty({region.shape!r}, dtype=np.{dtype})")
        lines.append(f"    o{k} = out{k}.reshape({n})")
    lines.append(f"    for i in range({n}):")
    for i in region.nodes:
        node = nodes[i]
        expr = SCALAR[node.op].format(*(local[j] for j in node.inputs))
        if node.dtype.kind == "f":
            expr = f"np.{node.dtype.name}({expr})"
        lines.append(f"        t{i} = {expr}")
        local[i] = f"t{i}"
    for k, i in enumerate(region.outputs):
        lines.append(f"        o{k}[i] = t{i}")
    outs = ", ".join(f"out{k}" for k in range(len(region.outputs)))
    lines.append(f"    return ({outs},)")
    return "\n".join(lines) + "\n"


HELPERS = dict(scalar_math.FUNCTIONS, math=math, np=np)
