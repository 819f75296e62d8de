"""Horizontal batching: many independent small elementwise ops of one kind become one numpy call.

On arrays of a few numbers a numpy call costs its fixed overhead, whatever it computes. A graph that
repeats a cell (an unrolled chain, an RNN) holds many ops that do the same thing to different, already
computed values, e.g. the ``cos(h_i)`` and ``1 - o_i**2`` of every cycle in the backward pass. When the
values they read are rows of one buffer (their producers write there through ``out=``), a single call over
the stacked buffer computes them all, and each op's result is a row of the output buffer, a view bound
once per plan. Only the genuinely sequential part of the graph is left as one call per op.

The same goes for a running sum ``s1 = a + b1, s2 = s1 + b2, ...`` (autodiff writes one at every fork, e.g.
the input of an unrolled chain): when each ``b`` is written into a row of one buffer, one ``np.add.reduce``
over the rows replaces the chain of adds. Reducing over the leading axis adds row after row, in order, so
the bits are those of the chain.

Works on a plan's concrete graph; results are identical to computing each op on its own (same ufunc, same
values, elementwise, same order of additions).
"""
from __future__ import annotations

import math
from collections import Counter

import numpy as np

from . import chains
from ..graph import Graph, Node
from ..ops.registry import REGISTRY, VIEW
from ..tensor import LEAVES
from .memory import permuted_values

MAX_SIZE = 256        # elements per op: beyond this the work, not the call, dominates
MIN_BATCH = 4


class Batched:
    """The result: a graph with batched nodes, its order, and the buffers results are written into."""

    def __init__(self, graph, order, fixed_out, groups, shapes, folds=(), scans=()):
        self.graph, self.order, self.fixed_out, self.groups = graph, order, fixed_out, groups
        self.folds = folds        # (adds, rows) of each running sum computed as one reduction
        self.scans = scans        # (links, rows) of each product chain computed as one scan
        self.shapes = shapes      # concrete shapes, the batched nodes' included
        self.nbytes = 0           # of the stacked buffers allocated for the plan


def _batchable(node, shapes):
    kernel = REGISTRY[node.op].kernel if node.op not in LEAVES else None
    # Elementwise ufuncs only (one call over stacked rows gives each row's own result): a stacked buffer of
    # vectors is not a matrix (W @ h_i is not W @ [h_1; ...; h_k]).
    return (isinstance(kernel, np.ufunc) and kernel.signature is None and not node.attrs and node.dtype.kind == "f"
            and 0 < math.prod(shapes[node.id]) <= MAX_SIZE)


def batch(graph, order, shapes):
    """Batch what can be batched in ``graph`` (a plan's concrete graph); None when nothing is."""
    nodes = graph.nodes
    pos = {i: k for k, i in enumerate(order)}
    escaping = set()
    for i in list(graph.outputs) + [e for _, e in graph.updates] + [p for p, _ in graph.updates]:
        # A returned value, and everything a returned view shows, must stay out of the shared buffers.
        escaping.add(i)
        while nodes[i].inputs and REGISTRY[nodes[i].op].has(VIEW):
            i = nodes[i].inputs[0]
            escaping.add(i)
    # A value numpy lays out like a permuted operand would lose that layout in a C-ordered row (and a later
    # sum its order of additions): such values stay out of the shared buffers too.
    escaping |= permuted_values(graph, order)
    eff = dict(pos)       # where each value is computed: a batched op's members all move to its position

    def ready(i):
        return max((eff[j] for j in nodes[i].inputs), default=-1)
    row_of = {}           # producer id -> (buffer key, row)
    buffers = {}          # buffer key -> [member ids in row order]
    fixed_out = {}        # node id -> array the kernel writes into
    groups = []           # (first member position, batched node, members)

    def stackable(i, shape, dtype):
        n = nodes[i]
        return (i not in row_of and i not in escaping and n.inputs and _batchable(n, shapes)
                and not REGISTRY[n.op].has(VIEW) and tuple(shapes[i]) == tuple(shape) and n.dtype == dtype)

    by_kind = {}
    for i in order:
        n = nodes[i]
        if not n.inputs or i in escaping or not _batchable(n, shapes):
            continue
        kinds = tuple(("c", j) if nodes[j].op == "constant" else ("v",) for j in n.inputs)
        by_kind.setdefault((n.op, n.dtype.str, tuple(shapes[i]), kinds), []).append(i)

    for (op, _, shape, kinds), members in by_kind.items():
        if len(members) < MIN_BATCH:
            continue
        members.sort(key=pos.get)
        first = members[0]
        chosen = [m for m in members if ready(m) < pos[first] and m not in row_of]
        chosen = _consistent(chosen, kinds, nodes, row_of, stackable, shapes, shape, nodes[first].dtype)
        if len(chosen) < MIN_BATCH:
            continue
        inputs = []
        for k, kind in enumerate(kinds):
            column = [nodes[m].inputs[k] for m in chosen]
            if kind[0] == "c" or len(set(column)) == 1:
                inputs.append(column[0])
                continue
            key = row_of[column[0]][0] if column[0] in row_of else _new_buffer(column, buffers, row_of)
            rows = [row_of[j][1] for j in column]
            inputs.append((key, rows[0], rows[-1] + 1))
        groups.append((pos[first], op, shape, nodes[chosen[0]], chosen, inputs))
        key = ("out", chosen[0])          # (``first`` itself may not be chosen)
        buffers[key] = list(chosen)
        for r, m in enumerate(chosen):
            row_of[m] = (key, r)
            eff[m] = pos[first]

    scans = chains.find(graph, order, shapes, escaping, row_of, eff.get, stackable,
                      lambda n: _batchable(n, shapes))
    for links, _ in scans:
        for m in links:
            eff[m] = pos[links[0]]
    folds = _fold_chains(graph, order, shapes, escaping, row_of, stackable)
    if not groups and not folds and not scans:
        return None
    return _rewrite(graph, order, shapes, groups, buffers, row_of, fixed_out, folds, scans)


def _fold_chains(graph, order, shapes, escaping, row_of, stackable):
    """Running sums worth one reduction: lists ``(adds, rows)``; ``rows`` are the summed values in order.

    Every add but the last must feed only the next one; every row must be a constant (its row is filled
    once), a distinct elementwise result that can write its row itself, or a value already in a row of
    another plan buffer (a batched op's, a scan's: copied in, one strided copy per run of rows).
    """
    nodes = graph.nodes
    users = graph.consumers()

    def link(i):          # the add that continues a running sum from add ``i``, if any
        n = nodes[i]
        if n.op != "add" or i in row_of or not _batchable(n, shapes) or len(n.inputs) != 2:
            return None
        after = users.get(i, ())
        if i in escaping or len(after) != 1:
            return None
        t = nodes[after[0]]
        if (t.op == "add" and t.id not in row_of and _batchable(t, shapes) and t.inputs.count(i) == 1
                and tuple(shapes[t.id]) == tuple(shapes[i]) and t.dtype == n.dtype):
            return t.id
        return None

    nexts = {i: link(i) for i in order if nodes[i].op == "add"}
    # An add where two running sums meet (a + b of two chains) continues neither: each fold would take
    # it, and the other chain's last add as one of its rows.
    meets = Counter(t for t in nexts.values() if t is not None)
    nexts = {i: (t if t is None or meets[t] == 1 else None) for i, t in nexts.items()}
    continued = set(nexts.values())
    chained = {i for i, t in nexts.items() if t is not None} | (continued - {None})
    taken = set()

    def ok(j, shape, dtype, own=None):
        node = nodes[j]
        if j in taken or (j in chained and j != own):     # another running sum's add is never a row
            return False
        if node.op == "constant":
            return tuple(np.shape(node.value)) == tuple(shape)
        if j in row_of:
            return tuple(shapes[j]) == tuple(shape) and node.dtype == dtype
        return stackable(j, shape, dtype)

    folds = []
    for i in order:
        if i not in nexts or i in continued or nexts[i] is None:
            continue
        chain = [i]
        while nexts.get(chain[-1]) is not None:
            chain.append(nexts[chain[-1]])
        shape, dtype = shapes[i], nodes[i].dtype
        if math.prod(shape) < 2:
            continue           # one number per row: numpy would sum the rows pairwise, not in order
        adds, rows = [], []

        def close():
            if len(adds) >= MIN_BATCH and len(set(rows)) == len(rows):
                folds.append((list(adds), list(rows)))
                taken.update(rows)
            adds.clear()
            rows.clear()
        # An operand that cannot write a row (a leaf, a batched row) ends the fold; the add it feeds is
        # computed as usual, and the next fold starts from its result.
        for k, a in enumerate(chain):
            new = list(nodes[a].inputs) if k == 0 else [j for j in nodes[a].inputs if j != chain[k - 1]]
            if adds and all(ok(j, shape, dtype) for j in new):
                adds.append(a)
                rows.extend(new)
                continue
            close()
            start = new if k == 0 else [chain[k - 1]] + new
            own = chain[k - 1] if k else None      # this sum so far, computed as usual, may start the next fold
            if (k == 0 or not any(own in f for f, _ in folds)) and all(ok(j, shape, dtype, own) for j in start):
                adds.append(a)
                rows.extend(start)
        close()
    return folds


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


def _rewrite(graph, order, shapes, groups, buffers, row_of, fixed_out, folds=(), scans=()):
    nodes = dict(graph.nodes)
    arrays = {}
    for key, members in buffers.items():
        first = graph.nodes[members[0]]
        arrays[key] = np.zeros((len(members),) + tuple(shapes[members[0]]), dtype=first.dtype)
    for links, rows in scans:
        first = graph.nodes[links[0]]
        stack = np.zeros((len(rows),) + tuple(shapes[links[0]]), dtype=first.dtype)
        arrays[("factors", links[0])], arrays[("scan", links[0])] = stack, np.zeros_like(stack)
    # Producers whose results are read stacked write straight into their row.
    for key, members in buffers.items():
        if key[0] == "in":
            for r, j in enumerate(members):
                fixed_out[j] = arrays[key][r, ...]     # (a 0-d row is a view too)
    insert_at = {}
    for position, op, shape, template, chosen, inputs in groups:
        ids = []
        for item in inputs:
            if isinstance(item, tuple):
                key, start, stop = item
                view = Node("constant", (), {}, arrays[key][start:stop].shape, template.dtype,
                            value=arrays[key][start:stop], source=template.source, role=template.role)
                nodes[view.id] = view
                shapes[view.id] = view.shape
                ids.append(view.id)
                insert_at.setdefault(position, []).append(view.id)
            else:
                ids.append(item)
        out = arrays[("out", chosen[0])]
        batched = Node(op, ids, {}, out.shape, template.dtype, role=template.role, source=template.source,
                       scope=template.scope, rule=f"{len(chosen)} x {op}, batched")
        nodes[batched.id] = batched
        shapes[batched.id] = out.shape
        fixed_out[batched.id] = out
        insert_at.setdefault(position, []).append(batched.id)
        for r, m in enumerate(chosen):
            row = graph.nodes[m].copy(op="constant", inputs=[], attrs={}, value=out[r, ...])
            nodes[m] = row
    pos = {i: k for k, i in enumerate(order)}
    for links, rows in scans:
        template = graph.nodes[links[-1]]
        key = ("factors", links[0])
        stack, out = arrays[key], arrays[("scan", links[0])]
        copies, fed = _fill(rows, stack, key, row_of, arrays, graph.nodes, fixed_out, write_own=False)
        kernel = chains.Scan(stack, out, copies, [(r, k) for k, (_, r) in enumerate(fed)])
        node = Node("mul", [j for j, _ in fed], {}, out.shape, template.dtype, role=template.role,
                    source=template.source, scope=template.scope, rule=f"{len(links)} x mul, one scan",
                    meta={"kernel": kernel})
        nodes[node.id] = node
        shapes[node.id] = out.shape
        fixed_out[node.id] = out
        insert_at.setdefault(pos[links[0]], []).append(node.id)
        for k, m in enumerate(links, start=1):
            nodes[m] = graph.nodes[m].copy(op="constant", inputs=[], attrs={}, value=out[k, ...])
    gone, stacks = set(), []
    for adds, rows in folds:
        last = graph.nodes[adds[-1]]
        stack = np.zeros((len(rows),) + tuple(shapes[last.id]), dtype=last.dtype)
        stacks.append(stack)
        copies, _ = _fill(rows, stack, None, row_of, arrays, graph.nodes, fixed_out, write_own=True)
        if copies:       # some rows live in other buffers: a gather copies them in before the sum
            rows_node = Node("stack", (), {}, stack.shape, last.dtype, source=last.source, role=last.role,
                             meta={"kernel": chains.Gather(stack, copies)})
            fixed_out[rows_node.id] = stack
        else:
            rows_node = Node("constant", (), {}, stack.shape, last.dtype, value=stack, source=last.source,
                             role=last.role)
        nodes[rows_node.id] = rows_node
        shapes[rows_node.id] = stack.shape
        insert_at.setdefault(pos[last.id], []).append(rows_node.id)
        # Row after row, from -0.0 (numpy's reduce would start from +0.0): the chain's own bits, signed
        # zeros included (-0.0 + -0.0 is -0.0).
        initial = {"initial": last.dtype.type(-0.0)} if last.dtype.kind == "f" else {}
        nodes[last.id] = last.copy(op="sum", inputs=[rows_node.id], attrs={"axis": (0,), "keepdims": False, **initial})
        gone.update(adds[:-1])
    new_order = []
    for k, i in enumerate(order):
        new_order.extend(insert_at.get(k, ()))
        if i not in gone:
            new_order.append(i)
    for i in gone:
        del nodes[i]
    new = Graph(nodes, graph.outputs, graph.updates, graph.inputs)
    batched = Batched(new, new_order, fixed_out, groups, shapes, folds, scans)
    batched.nbytes = sum(a.nbytes for a in arrays.values()) + sum(a.nbytes for a in stacks)
    return batched


def _fill(rows, stack, own, row_of, arrays, nodes, fixed_out, write_own):
    """How each row of ``stack`` (whose buffer key is ``own``) gets its value, for the values ``rows``.

    Constants are written now; a producer marked as this stack's row (or, with ``write_own``, any other
    computed value) writes its row itself; a value in a row of another plan buffer is copied, one strided
    copy per run. Returns (copies, fed): the copy view pairs, and [(value id, its rows)] to copy at run time.
    """
    pairs, fed = {}, {}
    for r, j in enumerate(rows):
        where = row_of.get(j)
        if nodes[j].op == "constant":
            stack[r] = nodes[j].value
        elif where is not None and where == (own, r):
            fixed_out[j] = stack[r, ...]
        elif where is not None:
            pairs.setdefault(where[0], []).append((r, where[1]))
        elif write_own:
            fixed_out[j] = stack[r, ...]
        else:
            fed.setdefault(j, []).append(r)
    copies = [(stack[d], arrays[key][s]) for key, found in pairs.items() for d, s in chains.runs(found)]
    return copies, [(j, r[0] if len(r) == 1 else r) for j, r in fed.items()]
