"""Horizontal batching: many independent small elementwise ops of one kind become one numpy call.

On arrays of a few numbers a numpy call costs its fixed overhead, whatever it computes. A graph that
repeats a cell (an unrolled chain, an RNN) holds many ops that do the same thing to different, already
computed values, e.g. the ``cos(h_i)`` and ``1 - o_i**2`` of every cycle in the backward pass. When the
values they read are rows of one buffer (their producers write there through ``out=``), a single call over
the stacked buffer computes them all, and each op's result is a row of the output buffer, a view bound
once per plan. Only the genuinely sequential part of the graph is left as one call per op.

Running sums (``sums``) and chains of small products (``chains``) are found after the groups, and the
plan's graph is then rewritten over the stacked buffers (``stacked``).

Works on a plan's concrete graph; results are identical to computing each op on its own (same ufunc, same
values, elementwise, same order of additions).
"""
from __future__ import annotations

import math

import numpy as np

from ..ops.registry import REGISTRY, VIEW, is_a
from ..tensor import LEAVES
from . import chains, stacked, sums
from .memory import permuted_values

MAX_SIZE = 256        # elements per op: beyond this the work, not the call, dominates
MIN_BATCH = 4
_VARYING = ("v",)       # an operand that differs from member to member


def batchable(node, shapes, plain=None):
    """Whether ``node`` may be one row of a batched call. ``plain``: a dict the caller keeps for one plan,
    {op: whether its kernel is a plain ufunc}, so that is worked out once per op, not once per node."""
    plain = {} if plain is None else plain
    ufunc = plain.get(node.op)
    if ufunc is None:
        kernel = REGISTRY[node.op].kernel if node.op not in LEAVES else None
        # Elementwise ufuncs only (one call over stacked rows gives each row's own result): a stacked buffer
        # of vectors is not a matrix (W @ h_i is not W @ [h_1; ...; h_k]).
        ufunc = plain[node.op] = isinstance(kernel, np.ufunc) and kernel.signature is None
    return ufunc and not node.attrs and node.dtype.kind == "f" and 0 < math.prod(shapes[node.id]) <= MAX_SIZE


def batch(graph, order, shapes):
    """Batch what can be batched in ``graph`` (a plan's concrete graph): a stacked.Batched, or None when
    nothing is."""
    found = _Groups(graph, order, shapes)
    found.find()
    users = _Readers(graph)
    scans = chains.find(graph, order, shapes, found.escaping, found.row_of, found.where, found.stackable,
                        found.batchable, users, found.pos)
    for links, _ in scans:
        for m in links:
            found.eff[m] = found.pos[links[0]]
    folds = sums.find(graph, order, shapes, found.escaping, found.row_of, found.stackable,
                      found.batchable, MIN_BATCH, users)
    del users
    if not found.groups and not folds and not scans:
        return None
    return stacked.rewrite(graph, order, shapes, found.groups, found.buffers, found.row_of, folds, scans, found.pos)


class _Readers:
    """The readers of each value, as ``graph.consumers()`` lists them (one entry per use, in graph order),
    in less memory: one reader, the usual case, is kept as its id, not in a list of its own (a plan of
    millions of nodes would hold millions of lists). Only ``get(i, default)``, which gives a sequence."""

    def __init__(self, graph):
        one, more = {}, {}
        for node in graph.nodes.values():
            k = node.id
            for i in node.inputs:
                if i in more:
                    more[i].append(k)
                elif i in one:
                    more[i] = [one.pop(i), k]
                else:
                    one[i] = k
        self.one, self.more = one, more

    def get(self, i, default=None):
        reader = self.one.get(i)
        return (reader,) if reader is not None else self.more.get(i, default)


class _Groups:
    """Groups of independent ops of one kind whose varying operands can be rows of one buffer each."""

    def __init__(self, graph, order, shapes):
        self.nodes, self.order, self.shapes = graph.nodes, order, shapes
        self.pos = {i: k for k, i in enumerate(order)}
        self.escaping = _escaping(graph, order)
        self.eff = {}               # where a batched op's members are computed: all at its position
        self.row_of = {}            # producer id -> (buffer key, row)
        self.buffers = {}           # buffer key -> [member ids in row order]
        self.groups = []            # (first member position, op, shape, template node, members, inputs)
        self.plain = {}             # op -> whether its kernel is a plain ufunc (see batchable)

    def batchable(self, n):
        return batchable(n, self.shapes, self.plain)

    def where(self, j):
        """Where value ``j`` is computed (its own position unless batched: no copy of ``pos`` per node)."""
        moved = self.eff.get(j)
        return self.pos.get(j) if moved is None else moved

    def ready(self, i):
        eff, pos, last = self.eff, self.pos, -1
        for j in self.nodes[i].inputs:      # (a loop, not max() over where(): asked of every node)
            k = eff.get(j)
            if k is None:
                k = pos.get(j)
            if k > last:
                last = k
        return last

    def stackable(self, i, shape, dtype):
        n = self.nodes[i]
        return (i not in self.row_of and i not in self.escaping and n.inputs and batchable(n, self.shapes, self.plain)
                and not is_a(n, VIEW) and tuple(self.shapes[i]) == tuple(shape) and n.dtype == dtype)

    def find(self):
        by_kind = {}
        nodes, shapes, escaping, plain = self.nodes, self.shapes, self.escaping, self.plain
        for i in self.order:
            n = nodes[i]
            if not n.inputs or i in escaping or not batchable(n, shapes, plain):
                continue
            kinds = tuple([("c", j) if nodes[j].op == "constant" else _VARYING for j in n.inputs])
            by_kind.setdefault((n.op, n.dtype.str, tuple(shapes[i]), kinds), []).append(i)
        for (op, _, shape, kinds), members in by_kind.items():
            if len(members) >= MIN_BATCH:
                self.take(op, shape, kinds, members)

    def take(self, op, shape, kinds, members):
        """Batch what ``members`` (ops of one kind) allow: those ready before the first is, with operands
        that can be rows."""
        nodes, pos = self.nodes, self.pos
        members.sort(key=pos.get)
        first = members[0]
        chosen = [m for m in members if self.ready(m) < pos[first] and m not in self.row_of]
        chosen = _consistent(chosen, kinds, nodes, self.row_of, self.stackable, self.shapes, shape,
                             nodes[first].dtype)
        if len(chosen) < MIN_BATCH:
            return
        inputs = []
        for k, kind in enumerate(kinds):
            column = [nodes[m].inputs[k] for m in chosen]
            if kind[0] == "c" or len(set(column)) == 1:
                inputs.append(column[0])
                continue
            key = self.row_of[column[0]][0] if column[0] in self.row_of else _new_buffer(column, self.buffers,
                                                                                        self.row_of)
            rows = [self.row_of[j][1] for j in column]
            inputs.append((key, rows[0], rows[-1] + 1))
        self.groups.append((pos[first], op, shape, nodes[chosen[0]], chosen, inputs))
        key = ("out", chosen[0])          # (``first`` itself may not be chosen)
        self.buffers[key] = list(chosen)
        for r, m in enumerate(chosen):
            self.row_of[m] = (key, r)
            self.eff[m] = pos[first]


def _escaping(graph, order):
    """Values that must stay out of the shared buffers: what is returned (and everything a returned view
    shows), and what numpy lays out like a permuted operand, which would lose that layout in a C-ordered
    row (and a later sum its order of additions)."""
    nodes, escaping = graph.nodes, set()
    for i in list(graph.outputs) + [e for _, e in graph.updates] + [p for p, _ in graph.updates]:
        escaping.add(i)
        while nodes[i].inputs and is_a(nodes[i], VIEW):
            i = nodes[i].inputs[0]
            escaping.add(i)
    return escaping | permuted_values(graph, order)


def _consistent(chosen, kinds, nodes, row_of, stackable, shapes, shape, dtype):
    """The members of ``chosen`` whose varying inputs can be rows of one buffer each, in order: consecutive
    rows of a buffer they are already in (rows of the op's output shape), or distinct values that can
    write a new one.

    Each operand narrows ``chosen``; dropping a member for a later operand can break the run of rows an
    earlier one relied on, so the passes repeat until one keeps every member. A pass claims the new
    buffers exactly as ``batch`` will, so a value two operands read is seen as the rows it will be.
    Operands reading shifted runs of one another's rows (``a[i] * a[i + 1]``) would lose one member a
    pass, quadratic in the group: after a few passes the group is dropped instead.
    """
    for _ in range(4):
        if len(chosen) < MIN_BATCH:
            return chosen
        before = list(chosen)
        claimed = {}
        for k, kind in enumerate(kinds):
            if kind[0] == "c" or not chosen:
                continue
            column = [nodes[m].inputs[k] for m in chosen]
            if len(set(column)) == 1:
                continue
            where = {j: claimed.get(j, row_of.get(j)) for j in column}
            key = next((where[j][0] for j in column if where[j] is not None), None)
            in_rows, expect = [], None
            for m, j in zip(chosen, column):
                w = where[j]
                if (w is not None and w[0] == key and (expect is None or w[1] == expect)
                        and tuple(shapes[j]) == tuple(shape)):
                    in_rows.append(m)
                    expect = w[1] + 1
            new_rows, seen = [], set()
            for m, j in zip(chosen, column):
                if j not in claimed and stackable(j, shape, dtype) and j not in seen:
                    new_rows.append(m)
                    seen.add(j)
            if len(in_rows) >= len(new_rows):
                chosen = in_rows
            else:
                chosen = new_rows
                for r, m in enumerate(chosen):
                    claimed[nodes[m].inputs[k]] = (("new", k), r)
        if chosen == before:
            return chosen
    return []


def _new_buffer(column, buffers, row_of):
    key = ("in", column[0])
    buffers[key] = list(column)
    for r, j in enumerate(column):
        row_of[j] = (key, r)
    return key
