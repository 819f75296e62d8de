"""Elementwise regions: runs of scheduled nodes that one loop over the elements can compute together.

numpy pays a full pass over memory and a call's fixed cost per op; a region computes all its ops on a
small block of elements before moving to the next block, so intermediates stay in cache. ``lower`` turns a
region into instructions for a register machine whose registers are rows of that block: a backend compiles
one interpreter for them (``backend="numba"``), and nothing per graph.
"""
from __future__ import annotations

import math

import numpy as np

from . import scalar_math

# One scalar expression per op, over the operands' float64 values {0}, {1}, {2} (False/True as 0.0/1.0).
SCALAR = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "neg": "(-{0})", "pow": "power({0}, {1})", "pow_each": "({0} ** {1})", "exp": "math.exp({0})",
    "log": "math.log({0})", "log1p": "math.log1p({0})", "expm1": "math.expm1({0})", "sqrt": "math.sqrt({0})",
    "sin": "math.sin({0})", "cos": "math.cos({0})", "tanh": "math.tanh({0})", "abs": "abs({0})",
    "square": "({0} * {0})", "sigmoid": "sigmoid({0})", "softplus": "softplus({0})",
    "relu": "maximum({0}, 0.0)", "maximum": "maximum({0}, {1})", "minimum": "minimum({0}, {1})",
    "sign": "sign({0})", "where": "({1} if {0} else {2})", "clip": "minimum(maximum({0}, {1}), {2})",
    "less": "({0} < {1})", "less_equal": "({0} <= {1})", "greater": "({0} > {1})",
    "greater_equal": "({0} >= {1})", "equal": "({0} == {1})", "not_equal": "({0} != {1})",
    "stop_gradient": "{0}",
}
COMPARISONS = {"less", "less_equal", "greater", "greater_equal", "equal", "not_equal"}   # give True/False
OPS = tuple(SCALAR)                  # an instruction's opcode is its op's position here
_OPCODE = {op: k for k, op in enumerate(OPS)}
LOAD, CONST, STORE = len(OPS), len(OPS) + 1, len(OPS) + 2     # instructions that move values
AS_FLOAT32, AS_BOOL = 1, 2           # rounding after an op whose node is float32 or bool (0: none)
HELPERS = dict(scalar_math.FUNCTIONS, math=math)     # the names SCALAR expressions use
_RESULT_DTYPES = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.bool_))


class Region:
    """Consecutive scheduled nodes of one shape, computed by one loop."""

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.nodes = []            # node ids in schedule order
        self.inputs = []           # ids of values read from outside (arrays of the region's shape, or size 1)
        self.outputs = []          # ids of region nodes that something outside reads


def one_exponent(nodes, shapes, node):
    """Whether numpy's power loop reads one exponent for every element of ``node`` (a pow), as it does
    for a scalar exponent: its step is then 0, and numpy takes shortcuts (a square root for 0.5, where
    sqrt(-0.0) is -0.0 and sqrt(-inf) nan; IEEE pow gives 0.0 and inf). False when it reads one exponent
    per element (pow); None when that depends on how numpy orders its loops (an exponent broadcast along
    some axes only, e.g. (3, 1) against (3, 4): numpy 2.4 gives pow there but sqrt for (2, 1, 1)
    against (3, 4)).
    """
    base, exp = node.inputs
    out, a, b = tuple(shapes[node.id]), tuple(shapes[base]), tuple(shapes[exp])
    if math.prod(out) == 1:
        # One element: the exponent steps by its size only in numpy's loop for operands of the output's
        # shape (or a 0-d base); otherwise size-1 axes step by 0.
        return not (out and b == out and (a == out or not a))
    if math.prod(b) == 1:
        return True
    if nodes[exp].op in ("broadcast_to", "broadcast_like"):
        return False            # the pow kernel reads a broadcast view per element (ops.power_kernel)
    padded = (1,) * (len(out) - len(b)) + b
    if any(n == 1 and m > 1 for n, m in zip(padded, out)):
        return None
    return False


def instruction_op(nodes, shapes, node):
    """The op whose loop computes ``node``: pow is numpy's power with one exponent for all elements (its
    shortcuts), pow_each IEEE pow, as numpy computes an exponent read per element."""
    if node.op == "pow" and one_exponent(nodes, shapes, node) is False:
        return "pow_each"
    return node.op


def _fusible(node, shapes, nodes):
    if node.op not in SCALAR or node.dtype not in _RESULT_DTYPES:
        return False
    if node.op == "pow" and one_exponent(nodes, shapes, node) is None:
        return False
    shape = shapes[node.id]
    if math.prod(shape) == 0:
        return False
    for i in node.inputs:
        s = shapes[i]
        if tuple(s) != tuple(shape) and math.prod(s) != 1:
            return False       # only same-shaped operands or scalars: one flat index serves all
        if nodes[i].dtype.kind not in "fb" or nodes[i].dtype.itemsize > 8:
            return False       # a float64 holds each of their values exactly
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
            if current is not None and current.shape != tuple(shapes[i]):
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


class Code:
    """A region as instructions, one row each: (opcode, rounding, destination, operand a, b, c).

    Registers are rows of a scratch block. LOAD a, b: destination = packed input at offset a, one value
    for all elements when b is 1. CONST a: destination = consts[a]. STORE: output row ``destination`` =
    register a. A register is reused once its value's last reader has run.
    """

    def __init__(self, instructions, consts, registers, size, args, outputs):
        self.instructions = np.array(instructions, dtype=np.int64).reshape(-1, 6)
        self.consts = np.array(consts, dtype=np.float64)
        self.registers = registers       # rows the scratch block needs
        self.size = size                 # elements of the region's shape
        self.args = args                 # positions in region.inputs that are packed at call time, in order
        self.outputs = outputs           # (shape, dtype) per output row


def lower(graph, region, shapes) -> Code:
    """Instructions that compute ``region``: inputs load just before their first reader, outputs store
    right after their writer, so the registers live at once are only the values still to be read."""
    nodes = graph.nodes
    size = math.prod(region.shape)
    last = {}
    for k, i in enumerate(region.nodes):
        for j in nodes[i].inputs:
            last[j] = k
    out_row = {i: k for k, i in enumerate(region.outputs)}
    position = {j: k for k, j in enumerate(region.inputs)}
    code, consts, args, reg, free = [], [], [], {}, []
    registers = offset = 0

    def take():
        nonlocal registers
        if free:
            return free.pop()
        registers += 1
        return registers - 1

    for k, i in enumerate(region.nodes):
        node = nodes[i]
        for j in node.inputs:
            if j in reg:
                continue
            reg[j] = take()
            one = math.prod(shapes[j]) == 1 and tuple(shapes[j]) != region.shape
            if one and nodes[j].op == "constant":
                code.append((CONST, 0, reg[j], len(consts), 0, 0))
                consts.append(float(np.asarray(nodes[j].value).reshape(-1)[0]))
                continue
            code.append((LOAD, 0, reg[j], offset, int(one), 0))
            args.append(position[j])
            offset += 1 if one else size
        operands = [reg[j] for j in node.inputs] + [0] * (3 - len(node.inputs))
        dst = take()
        rounding = AS_FLOAT32 if node.dtype == np.float32 else 0
        if node.dtype == np.bool_ and node.op not in COMPARISONS:
            rounding = AS_BOOL
        code.append((_OPCODE[instruction_op(nodes, shapes, node)], rounding, dst, *operands))
        reg[i] = dst
        if i in out_row:
            code.append((STORE, 0, out_row[i], dst, 0, 0))
        for j in dict.fromkeys(node.inputs):
            if last[j] == k:
                free.append(reg[j])
        if i not in last:
            free.append(dst)
    outputs = [(region.shape, nodes[i].dtype) for i in region.outputs]
    return Code(code, consts, registers, size, args, outputs)
