"""Elementwise regions: runs of scheduled nodes that one loop over the elements can compute together.

numpy pays a full pass over memory and a call's fixed cost per op; a region computes all its ops on a
small block of elements before moving to the next block, so intermediates stay in cache. ``lower`` turns a
region into instructions for a register machine whose registers are rows of that block: a backend compiles
one interpreter for them (``backend="numba"``), and nothing per graph.

Each instruction computes one op's per-element template (``OpDef.scalar``), the same expression the scalar
path computes, on float64 registers (False/True as 0.0/1.0).
"""
from __future__ import annotations

import math

import numpy as np

from ..ops.registry import ELEMENTWISE, REGISTRY
from ..tensor import LEAVES

LOAD, CONST, STORE = 0, 1, 2         # instructions that move values; templates take the opcodes after these
FIRST_OPCODE = 3
AS_FLOAT32, AS_BOOL = 1, 2           # rounding after an op whose node is float32 or bool (0: none)
_RESULT_DTYPES = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.bool_))


class Region:
    """Consecutive scheduled nodes of one shape, computed by one loop."""

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.nodes = []            # node ids in schedule order
        self.inputs = []           # ids of values read from outside (arrays of the region's shape, or size 1)
        self.outputs = []          # ids of region nodes that something outside reads


def template(nodes, shapes, node):
    """The per-element expression that computes ``node`` in a loop, or None when it has none."""
    if node.op in LEAVES:
        return None
    opdef = REGISTRY[node.op]
    return opdef.template(node, shapes, nodes) if opdef.has(ELEMENTWISE) else None


def opcodes(templates) -> dict:
    """{template: opcode} for an interpreter of these templates (sorted: the same set, the same numbers)."""
    return {t: FIRST_OPCODE + k for k, t in enumerate(sorted(templates))}


def _fusible(node, shapes, nodes, broadcast=False):
    if node.dtype not in _RESULT_DTYPES or template(nodes, shapes, node) is None:
        return False
    shape = shapes[node.id]
    if math.prod(shape) == 0:
        return False
    for i in node.inputs:
        s = shapes[i]
        if tuple(s) != tuple(shape) and math.prod(s) != 1 and not (broadcast and broadcasts(s, shape)):
            return False       # same-shaped operands or scalars: one flat index serves all
        if nodes[i].dtype.kind not in "fb" or nodes[i].dtype.itemsize > 8:
            return False       # a float64 holds each of their values exactly
    return True


def broadcasts(shape, to) -> bool:
    """Whether numpy broadcasts an operand of ``shape`` to ``to`` without growing ``to``."""
    offset = len(to) - len(shape)
    return offset >= 0 and all(n in (1, to[offset + d]) for d, n in enumerate(shape))


def find_regions(graph, order, shapes, broadcast=False, smallest=2):
    """Regions of fusible nodes with equal shapes, and the schedule that keeps each region contiguous.

    A node that cannot be fused does not end the current region unless a later member needs its value:
    it is moved to just after the region (a forward loss reduction, say, then no longer splits the
    forward from the backward loop, and the values saved for the backward never leave registers).
    ``broadcast``: operands that numpy broadcasts to a node's shape may join it (a loop indexing each
    axis reads them; the interpreter's flat index does not). Returns (regions of at least ``smallest``
    nodes, new order).
    """
    nodes = graph.nodes
    found = _Regions()
    for i in order:
        node = nodes[i]
        fusible = node.op not in LEAVES and _fusible(node, shapes, nodes, broadcast)
        if node.op in LEAVES:
            found.new_order.append(i)
        elif fusible and not found.needs_deferred(node):
            found.join(i, shapes[i])
        elif found.current is not None and not found.needs_deferred(node) and not fusible:
            found.defer(i)          # runs after the region; members after this point must not need it
        else:
            found.close()
            if fusible:
                found.join(i, shapes[i])
            else:
                found.new_order.append(i)
    found.close()
    regions = [r for r in found.regions if len(r.nodes) >= smallest]
    _connect(graph, regions)
    return regions, found.new_order


class _Regions:
    """The regions found so far, the one being grown, and the nodes deferred until it closes."""

    def __init__(self):
        self.regions, self.current, self.deferred, self.blocked, self.new_order = [], None, [], set(), []

    def needs_deferred(self, node) -> bool:
        return any(j in self.blocked for j in node.inputs)

    def join(self, i, shape):
        if self.current is not None and self.current.shape != tuple(shape):
            self.close()
        if self.current is None:
            self.current = Region(shape)
        self.current.nodes.append(i)

    def defer(self, i):
        self.deferred.append(i)
        self.blocked.add(i)

    def close(self):
        if self.current is not None:
            self.regions.append(self.current)
            self.new_order.extend(self.current.nodes)
        self.new_order.extend(self.deferred)
        self.current, self.deferred, self.blocked = None, [], set()


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


def lower(graph, region, shapes, opcode) -> Code:
    """Instructions that compute ``region`` (``opcode``: {template: opcode} of the interpreter that will run
    them): inputs load just before their first reader, outputs store right after their writer, so the
    registers live at once are only the values still to be read."""
    nodes = graph.nodes
    last = {}
    for k, i in enumerate(region.nodes):
        for j in nodes[i].inputs:
            last[j] = k
    out_row = {i: k for k, i in enumerate(region.outputs)}
    code = _Lowering(region, math.prod(region.shape))
    for k, i in enumerate(region.nodes):
        node = nodes[i]
        for j in node.inputs:
            if j not in code.reg:
                code.load(j, nodes[j], shapes[j])
        operands = [code.reg[j] for j in node.inputs] + [0] * (3 - len(node.inputs))
        dst = code.take()
        rounding = AS_FLOAT32 if node.dtype == np.float32 else AS_BOOL if node.dtype == np.bool_ else 0
        code.code.append((opcode[template(nodes, shapes, node)], rounding, dst, *operands))
        code.reg[i] = dst
        if i in out_row:
            code.code.append((STORE, 0, out_row[i], dst, 0, 0))
        for j in dict.fromkeys(node.inputs):
            if last[j] == k:
                code.free.append(code.reg[j])
        if i not in last:
            code.free.append(dst)
    outputs = [(region.shape, nodes[i].dtype) for i in region.outputs]
    return Code(code.code, code.consts, code.registers, code.size, code.args, outputs)


class _Lowering:
    """Registers handed out and taken back while a region's instructions are written."""

    def __init__(self, region, size):
        self.region, self.size = region, size
        self.position = {j: k for k, j in enumerate(region.inputs)}
        self.code, self.consts, self.args, self.reg, self.free = [], [], [], {}, []
        self.registers = self.offset = 0

    def take(self):
        if self.free:
            return self.free.pop()
        self.registers += 1
        return self.registers - 1

    def load(self, j, node, shape):
        self.reg[j] = register = self.take()
        one = math.prod(shape) == 1 and tuple(shape) != self.region.shape
        if one and node.op == "constant":
            self.code.append((CONST, 0, register, len(self.consts), 0, 0))
            self.consts.append(float(np.asarray(node.value).reshape(-1)[0]))
            return
        self.code.append((LOAD, 0, register, self.offset, int(one), 0))
        self.args.append(self.position[j])
        self.offset += 1 if one else self.size
