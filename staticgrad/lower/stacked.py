"""The plan's graph rewritten over stacked buffers: batched groups, scans of product chains and running sums.

Each group's members become rows (constant views) of its output buffer, computed by one node; each scan's
links rows of its result; each running sum one ``sum`` over the rows its terms write into.
"""
from __future__ import annotations

import numpy as np

from ..graph import Graph, Node
from . import chains


class Batched:
    """The result: a graph with batched nodes, its order, and the buffers results are written into."""

    def __init__(self, graph, order, fixed_out, groups, shapes, folds=(), scans=()):
        self.graph, self.order, self.fixed_out, self.groups = graph, order, fixed_out, groups
        self.folds = folds        # (adds, rows) of each running sum computed as one reduction
        self.scans = scans        # (links, rows) of each product chain computed as one scan
        self.shapes = shapes      # concrete shapes, the batched nodes' included
        self.nbytes = 0           # of the stacked buffers allocated for the plan


def rewrite(graph, order, shapes, groups, buffers, row_of, folds=(), scans=(), pos=None) -> Batched:
    restack = _Restack(graph, shapes, buffers, scans, row_of)
    for group in groups:
        restack.group(*group)
    pos = {i: k for k, i in enumerate(order)} if pos is None else pos
    for links, rows in scans:
        restack.scan(links, rows, pos[links[0]])
    for adds, rows in folds:
        restack.fold(adds, rows, pos[adds[-1]])
    new_order = []
    for k, i in enumerate(order):
        new_order.extend(restack.insert_at.get(k, ()))
        if i not in restack.gone:
            new_order.append(i)
    for i in restack.gone:
        del restack.nodes[i]
    new = Graph(restack.nodes, graph.outputs, graph.updates, graph.inputs)
    batched = Batched(new, new_order, restack.fixed_out, groups, shapes, folds, scans)
    batched.nbytes = sum(a.nbytes for a in restack.arrays.values()) + sum(a.nbytes for a in restack.stacks)
    return batched


class _Restack:
    """The nodes of the rewritten graph, the stacked arrays and where new nodes go in the schedule."""

    def __init__(self, graph, shapes, buffers, scans, row_of):
        self.graph, self.shapes, self.row_of = graph, shapes, row_of
        self.nodes, self.arrays, self.fixed_out, self.insert_at = dict(graph.nodes), {}, {}, {}
        self.gone, self.stacks = set(), []
        for key, members in buffers.items():
            first = graph.nodes[members[0]]
            self.arrays[key] = np.zeros((len(members),) + tuple(shapes[members[0]]), dtype=first.dtype)
        for links, rows in scans:
            stack = np.zeros((len(rows),) + tuple(shapes[links[0]]), dtype=graph.nodes[links[0]].dtype)
            self.arrays[("factors", links[0])], self.arrays[("scan", links[0])] = stack, np.zeros_like(stack)
        # Producers whose results are read stacked write straight into their row.
        for key, members in buffers.items():
            if key[0] == "in":
                for r, j in enumerate(members):
                    self.fixed_out[j] = self.arrays[key][r, ...]     # (a 0-d row is a view too)

    def add(self, node, position, shape):
        self.nodes[node.id] = node
        self.shapes[node.id] = shape
        self.insert_at.setdefault(position, []).append(node.id)

    def group(self, position, op, shape, template, chosen, inputs):
        ids = []
        for item in inputs:
            if not isinstance(item, tuple):
                ids.append(item)
                continue
            key, start, stop = item
            rows = self.arrays[key][start:stop]
            view = Node("constant", (), {}, rows.shape, template.dtype, value=rows, source=template.source,
                        role=template.role)
            self.add(view, position, view.shape)
            ids.append(view.id)
        out = self.arrays[("out", chosen[0])]
        batched = Node(op, ids, {}, out.shape, template.dtype, role=template.role, source=template.source,
                       scope=template.scope, rule=f"{len(chosen)} x {op}, batched")
        self.add(batched, position, out.shape)
        self.fixed_out[batched.id] = out
        for r, m in enumerate(chosen):
            self.nodes[m] = self.graph.nodes[m].copy(op="constant", inputs=[], attrs={}, value=out[r, ...])

    def scan(self, links, rows, position):
        template, key = self.graph.nodes[links[-1]], ("factors", links[0])
        stack, out = self.arrays[key], self.arrays[("scan", links[0])]
        copies, fed = _fill(rows, stack, key, self.row_of, self.arrays, self.graph.nodes, self.fixed_out,
                            write_own=False)
        kernel = chains.Scan(stack, out, copies, [(r, k) for k, (_, r) in enumerate(fed)])
        node = Node("mul", [j for j, _ in fed], {}, out.shape, template.dtype, role=template.role,
                    source=template.source, scope=template.scope, rule=f"{len(links)} x mul, one scan",
                    meta={"kernel": kernel})
        self.add(node, position, out.shape)
        self.fixed_out[node.id] = out
        for k, m in enumerate(links, start=1):
            self.nodes[m] = self.graph.nodes[m].copy(op="constant", inputs=[], attrs={}, value=out[k, ...])

    def fold(self, adds, rows, position):
        last = self.graph.nodes[adds[-1]]
        stack = np.zeros((len(rows),) + tuple(self.shapes[last.id]), dtype=last.dtype)
        self.stacks.append(stack)
        copies, _ = _fill(rows, stack, None, self.row_of, self.arrays, self.graph.nodes, self.fixed_out,
                          write_own=True)
        if copies:       # some rows live in other buffers: a gather copies them in before the sum
            rows_node = Node("stack", (), {}, stack.shape, last.dtype, source=last.source, role=last.role,
                             meta={"kernel": chains.Gather(stack, copies)})
            self.fixed_out[rows_node.id] = stack
        else:
            rows_node = Node("constant", (), {}, stack.shape, last.dtype, value=stack, source=last.source,
                             role=last.role)
        self.add(rows_node, position, stack.shape)
        # Row after row, from -0.0 (numpy's reduce would start from +0.0): the chain's own bits, signed
        # zeros included (-0.0 + -0.0 is -0.0).
        initial = {"initial": last.dtype.type(-0.0)} if last.dtype.kind == "f" else {}
        self.nodes[last.id] = last.copy(op="sum", inputs=[rows_node.id],
                                        attrs={"axis": (0,), "keepdims": False, **initial})
        self.gone.update(adds[:-1])


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
