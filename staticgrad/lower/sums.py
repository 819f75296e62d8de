"""Running sums ``s1 = a + b1, s2 = s1 + b2, ...`` as one reduction over stacked rows.

autodiff writes one at every fork (e.g. the input of an unrolled chain). When each ``b`` is written into a
row of one buffer, one ``np.add.reduce`` over the rows replaces the chain of adds; reducing over the
leading axis adds row after row, in order, so the bits are those of the chain.
"""
from __future__ import annotations

import math
from collections import Counter

import numpy as np


def find(graph, order, shapes, escaping, row_of, stackable, batchable, min_adds, users=None):
    """Running sums worth one reduction: lists ``(adds, rows)``; ``rows`` are the summed values in order.

    Every add but the last must feed only the next one; every row must be a constant (its row is filled
    once), a distinct elementwise result that can write its row itself, or a value already in a row of
    another plan buffer (a batched op's, a scan's: copied in, one strided copy per run of rows).
    """
    nodes = graph.nodes
    nexts = _links(graph, order, shapes, escaping, row_of, batchable, graph.consumers() if users is None else users)
    continued = set(nexts.values())
    chained = {i for i, t in nexts.items() if t is not None} | (continued - {None})
    rows_ok = _Rows(nodes, shapes, row_of, stackable, chained)
    folds = []
    for i in order:
        if i not in nexts or i in continued or nexts[i] is None:
            continue
        chain = [i]
        while nexts.get(chain[-1]) is not None:
            chain.append(nexts[chain[-1]])
        if math.prod(shapes[i]) >= 2:     # one number per row: numpy would sum the rows pairwise, not in order
            folds += _folds_of(chain, nodes, shapes[i], nodes[i].dtype, rows_ok, folds, min_adds)
    return folds


def _links(graph, order, shapes, escaping, row_of, batchable, users):
    """{add: the add that continues a running sum from it, or None}."""
    nodes = graph.nodes

    def link(i):
        n = nodes[i]
        if n.op != "add" or i in row_of or not batchable(n) or len(n.inputs) != 2:
            return None
        after = users.get(i, ())
        if i in escaping or len(after) != 1:
            return None
        t = nodes[after[0]]
        if (t.op == "add" and t.id not in row_of and batchable(t) and t.inputs.count(i) == 1
                and tuple(shapes[t.id]) == tuple(shapes[i]) and t.dtype == n.dtype):
            return t.id
        return None

    nexts = {i: link(i) for i in order if nodes[i].op == "add"}
    # An add where two running sums meet (a + b of two chains) continues neither: each fold would take
    # it, and the other chain's last add as one of its rows.
    meets = Counter(t for t in nexts.values() if t is not None)
    return {i: (t if t is None or meets[t] == 1 else None) for i, t in nexts.items()}


class _Rows:
    """Which values may be rows of a running sum's stack (each at most once, in all the folds)."""

    def __init__(self, nodes, shapes, row_of, stackable, chained):
        self.nodes, self.shapes, self.row_of, self.stackable, self.chained = nodes, shapes, row_of, stackable, chained
        self.taken = set()

    def ok(self, j, shape, dtype, own=None):
        node = self.nodes[j]
        if j in self.taken or (j in self.chained and j != own):     # another running sum's add is never a row
            return False
        if node.op == "constant":
            return tuple(np.shape(node.value)) == tuple(shape)
        if j in self.row_of:
            return tuple(self.shapes[j]) == tuple(shape) and node.dtype == dtype
        return self.stackable(j, shape, dtype)


def _folds_of(chain, nodes, shape, dtype, rows_ok, earlier, min_adds):
    """The folds one chain of adds gives. An operand that cannot write a row (a leaf, a batched row) ends a
    fold; the add it feeds is computed as usual, and the next fold starts from its result."""
    folds, adds, rows = [], [], []

    def close():
        if len(adds) >= min_adds and len(set(rows)) == len(rows):
            folds.append((list(adds), list(rows)))
            rows_ok.taken.update(rows)
        adds.clear()
        rows.clear()
    for k, a in enumerate(chain):
        new = list(nodes[a].inputs) if k == 0 else [j for j in nodes[a].inputs if j != chain[k - 1]]
        if adds and all(rows_ok.ok(j, shape, dtype) for j in new):
            adds.append(a)
            rows.extend(new)
            continue
        close()
        start = new if k == 0 else [chain[k - 1]] + new
        own = chain[k - 1] if k else None      # this sum so far, computed as usual, may start the next fold
        if (k == 0 or not any(own in f for f, _ in earlier + folds)) and all(rows_ok.ok(j, shape, dtype, own)
                                                                          for j in start):
            adds.append(a)
            rows.extend(start)
    close()
    return folds
