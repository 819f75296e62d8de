"""Product scans: a chain of small multiplications ``g1 = g0 * f1, g2 = g1 * f2, ...`` in one numpy call.

The reverse sweep of an unrolled elementwise chain is such a chain: the adjoint is multiplied by one local
derivative per op (``1 - o**2``, the constant, ``cos(h)``), and every factor is known once the forward has
run. On arrays of a few numbers each multiplication costs a numpy call's fixed overhead. When every factor
is ready before the chain starts, the factors are stacked as rows of one buffer (behind the start value)
and ``np.multiply.accumulate`` over its leading axis computes every link: row ``k`` of the result is row
``k - 1`` times factor ``k``, one rounding per link, in the chain's order, so the bits are the chain's.
Each link's value is then a row of the result, read by whatever used it.

Used by batching on a plan's concrete graph, after horizontal batching (a factor may be a row of a batched
op's buffer: it is copied in, one strided copy per run of rows) and before running sums (which may then sum
rows of the scan).
"""
from __future__ import annotations

import math

import numpy as np

# np.multiply.accumulate walks the leading axis column by column: at 10 numbers per row a 150-link scan
# takes 7 µs against 70 µs of row-by-row calls, at 64 it is even, at 256 six times slower (ad hoc timeit).
MAX_SIZE = 32
MIN_LINKS = 4


class Rows:
    """Fills rows of ``stack`` from other plan buffers before a kernel reads it.

    ``copies`` are (rows of ``stack``, rows of a source buffer) view pairs, one per run of rows with a
    constant stride in both; ``fed`` are (row indices, position among the call's arguments) for values
    that live nowhere the plan owns (a feed, a view), copied in at run time.
    """

    def __init__(self, stack, copies=(), fed=()):
        self.stack, self.copies, self.fed = stack, list(copies), list(fed)

    def fill(self, values):
        for dst, src in self.copies:
            np.copyto(dst, src)
        for rows, k in self.fed:
            self.stack[rows] = values[k]


class Gather(Rows):
    """The stacked rows of a running sum, some copied from other buffers: returns the filled stack."""

    name = "gather"

    def __call__(self, *values):
        self.fill(values)
        return self.stack


class Scan(Rows):
    """Every link of a product chain: ``out[k] = out[k - 1] * stack[k]``, ``out[0] = stack[0]``."""

    name = "mul_scan"

    def __init__(self, stack, out, copies=(), fed=()):
        super().__init__(stack, copies, fed)
        self.out = out

    def __call__(self, *values):
        self.fill(values)
        return np.multiply.accumulate(self.stack, axis=0, out=self.out)


def find(graph, order, shapes, escaping, row_of, ready, stackable, batchable, users=None, pos=None):
    """Product chains worth a scan: a list of (links, rows), ``rows[0]`` the start, ``rows[k]`` link k's factor.

    A link is an unbatched float ``mul`` of a few numbers whose result is not returned; each link after the
    first multiplies the previous one by a factor that is a constant, or a value computed before the
    chain's first link (``ready(j)`` gives where a value is computed). Links may have other readers.
    Marks the links in ``row_of`` as rows ``1..n`` of ``("scan", first)``, and each factor that can write its
    own row (``stackable``) as row k of ``("factors", first)``.
    """
    nodes = graph.nodes
    pos = {i: k for k, i in enumerate(order)} if pos is None else pos
    users = graph.consumers() if users is None else users

    def link(i):
        n = nodes[i]
        return (n.op == "mul" and len(n.inputs) == 2 and n.inputs[0] != n.inputs[1] and i not in row_of
                and i not in escaping and batchable(n) and math.prod(shapes[i]) <= MAX_SIZE)

    def row_ok(j, shape, dtype, start):
        n = nodes[j]
        if n.op == "constant":
            value = np.asarray(n.value)
            return value.dtype == dtype and np.broadcast_shapes(value.shape, shape) == shape
        return tuple(shapes[j]) == shape and n.dtype == dtype and ready(j) < start

    taken, scans = set(), []              # (a link walked once is never walked again: linear time)
    for i in order:
        if nodes[i].op != "mul" or i in taken or not link(i):     # (the op first: most nodes are no link)
            continue
        shape, dtype, start = tuple(shapes[i]), nodes[i].dtype, pos[i]
        if not all(row_ok(j, shape, dtype, start) for j in nodes[i].inputs):
            continue
        links, rows = [i], list(nodes[i].inputs)
        while True:
            last = links[-1]
            nxt = None
            for u in users.get(last, ()):
                if u in taken or not link(u) or tuple(shapes[u]) != shape or nodes[u].dtype != dtype:
                    continue
                other = [j for j in nodes[u].inputs if j != last]
                if len(other) == 1 and row_ok(other[0], shape, dtype, start):
                    nxt = (u, other[0])
                    break
            if nxt is None:
                break
            links.append(nxt[0])
            rows.append(nxt[1])
        taken.update(links)
        if len(links) < MIN_LINKS or _calls(rows, nodes, row_of, stackable, shape, dtype) >= len(links):
            continue
        for k, m in enumerate(links, start=1):
            row_of[m] = (("scan", i), k)
        for k, j in enumerate(rows):
            if nodes[j].op != "constant" and stackable(j, shape, dtype):
                row_of[j] = (("factors", i), k)
        scans.append((links, rows))
    return scans


def _calls(rows, nodes, row_of, stackable, shape, dtype):
    """numpy calls a scan over ``rows`` makes: the accumulation, one copy per run of rows taken from
    another buffer, one per value copied in at run time (constants and values that write their own row
    cost nothing)."""
    pairs, fed, own = {}, set(), set()
    for r, j in enumerate(rows):
        if nodes[j].op == "constant":
            continue
        if j in row_of:
            pairs.setdefault(row_of[j][0], []).append((r, row_of[j][1]))
        elif j not in own and stackable(j, shape, dtype):
            own.add(j)
        else:
            fed.add(j)
    return 1 + len(fed) + sum(len(runs(found)) for found in pairs.values())


def runs(pairs):
    """(destination row, source row) pairs as (destination slice, source slice) pairs, one per run of rows
    with a constant step on both sides (destinations ascending, sources either way)."""
    groups = []
    for d, s in sorted(pairs):
        if groups:
            ds, ss = groups[-1]
            if len(ds) == 1:
                extends = d > ds[-1] and s != ss[-1]
            else:
                extends = d - ds[-1] == ds[-1] - ds[-2] and s - ss[-1] == ss[-1] - ss[-2]
            if extends:
                ds.append(d)
                ss.append(s)
                continue
        groups.append(([d], [s]))
    return [(_slice(ds), _slice(ss)) for ds, ss in groups]


def _slice(rows):
    step = rows[1] - rows[0] if len(rows) > 1 else 1
    stop = rows[-1] + (1 if step > 0 else -1)
    return slice(rows[0], stop if stop >= 0 else None, step)
