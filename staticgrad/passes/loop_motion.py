"""The rewrites of one scan node for passes/loops.py: dead values, hoisting, sinking.

Each takes the graph and a scan node's id and returns (graph, how many values or nodes it moved or
dropped). A scan's body inputs are its carries, then its slices (``n_xs``), then the values every step
reads; the node's inputs are in the same order, and its values are the final carries, then the stacked
per-step outputs.
"""
from __future__ import annotations

import numpy as np

from ..graph import Graph, Node
from ..ops.registry import REGISTRY


class ScanParts:
    """A scan node taken apart: its body graph, its parts' ids, and who reads its values."""

    def __init__(self, graph, i):
        self.graph, self.i, self.node = graph, i, graph.nodes[i]
        attrs = self.node.attrs
        self.body = attrs["body"]
        self.bg = self.body.graph
        self.C, self.X = attrs["n_carry"], attrs["n_xs"]
        ins, C, X = self.bg.inputs, self.C, self.X
        self.p_carry, self.p_x, self.p_cap = ins[:C], ins[C:C + X], ins[C + X:]
        outer = self.node.inputs
        self.init, self.xs, self.caps = outer[:C], outer[C:C + X], outer[C + X:]
        self.readers = {}
        live = graph.live()
        for j, n in graph.nodes.items():
            if n.op == "loop_output" and n.inputs[0] == i and j in live:
                self.readers.setdefault(n.attrs["index"], []).append(j)

    def rebuilt(self, carries, slices, caps, outputs, before=(), after=(), replace=None, **attrs):
        """The graph with this scan made of body inputs ``carries``/``slices``/``caps`` ((body id, outer id)
        pairs) and body ``outputs`` (carries first, as many as ``carries``), ``before``/``after`` nodes
        around it, readers of value k reading new value ``index[k]`` or the node ``replace[k]``."""
        replace = replace or {}
        body_nodes = dict(self.bg.nodes)
        params = [b for b, _ in carries + slices + caps]
        new_bg = Graph(body_nodes, outputs, (), params).without_dead()
        body = self.body.with_graph(new_bg)
        node = self.node.copy(inputs=[o for _, o in carries + slices + caps],
                              attrs=dict(self.node.attrs, body=body, n_carry=len(carries), n_xs=len(slices), **attrs))
        old_outputs = list(self.bg.outputs)
        # A carry is found by its placeholder: two carries may end each step on one body value, yet start
        # (and so end a loop of no steps) on different ones. A stacked value is found by its body value.
        carry_at = {b: k for k, (b, _) in enumerate(carries)}
        n = len(carries)
        index = {}
        for k, o in enumerate(old_outputs):
            if k in replace:
                continue
            if k < self.C:
                if self.p_carry[k] in carry_at:
                    index[k] = carry_at[self.p_carry[k]]
            elif o in outputs[n:]:      # (else dropped: nothing live reads it)
                index[k] = n + outputs[n:].index(o)
        return _splice(self.graph, self.i, list(before), node, list(after), index, replace)


def _splice(graph, i, before, scan, after, index, replace):
    made = [n.id for n in before] + [n.id for n in after]     # (in order: each after its inputs)
    nodes, mapping = {}, {}
    for j, node in graph.nodes.items():
        if j == i:
            for n in before:
                nodes[n.id] = n
            nodes[i] = scan
            for n in after:
                nodes[n.id] = n
            continue
        if node.op == "loop_output" and node.inputs[0] == i:
            k = node.attrs["index"]
            if k in replace:
                mapping[j] = replace[k]
                continue
            if k not in index:
                continue            # (read by nothing live: dropped)
            node = node.copy(attrs=dict(node.attrs, index=index[k]))
        if any(x in mapping for x in node.inputs):
            node = node.copy(inputs=[mapping.get(x, x) for x in node.inputs])
        nodes[j] = node
    for j in made:
        # (a node made here states what its op's shape rule gives on its inputs: the sizes the body knew
        # may be fewer than those of the values outside, and a saved file is checked against the rule)
        node = nodes[j]
        if node.inputs:
            node.shape, node.dtype = REGISTRY[node.op].infer([nodes[x] for x in node.inputs], **node.attrs)
    return Graph(nodes, [mapping.get(o, o) for o in graph.outputs],
                 [(p, mapping.get(e, e)) for p, e in graph.updates], graph.inputs)


def _whole(graph, s):
    """{slice param: its outer stacked value} for the slices that exist whole: not the stacked values of a
    checkpointed scan, which a plan keeps as checkpoints for a reverse loop to read row by row (work moved
    out of the loop would need them whole)."""
    whole = {}
    for p, o in zip(s.p_x, s.xs):
        node = graph.nodes[o]
        loop = graph.nodes[node.inputs[0]] if node.op == "loop_output" else None
        if loop is None or loop.attrs.get("checkpoint") is None:
            whole[p] = o
    return whole


def _depends(bg, roots):
    """Ids of the body nodes that depend on any of ``roots`` (roots included)."""
    found = set(roots)
    for j, n in bg.nodes.items():
        if j not in found and any(x in found for x in n.inputs):
            found.add(j)
    return found


# ------------------------------------------------------------------ dead values
def drop_dead(graph, i):
    s = ScanParts(graph, i)
    outs = s.bg.outputs
    kept_y, stacked = [], set()
    for k in range(s.C, len(outs)):
        if k in s.readers and outs[k] not in stacked:      # (one stack of a body value read twice)
            kept_y.append(k)
            stacked.add(outs[k])
    kept_c = {c for c in range(s.C) if c in s.readers}
    while True:
        needed = s.bg._needed([outs[c] for c in kept_c] + [outs[k] for k in kept_y])
        more = {c for c in range(s.C) if c not in kept_c and s.p_carry[c] in needed}
        if not more:
            break
        kept_c |= more
    used = needed
    carries = [(s.p_carry[c], s.init[c]) for c in sorted(kept_c)]
    slices = [(p, o) for p, o in zip(s.p_x, s.xs) if p in used]
    if not slices and s.xs and s.node.attrs["length"] is None:
        slices = [(s.p_x[0], s.xs[0])]      # (a loop of unknown length counts its steps on an xs: one stays)
    caps = [(p, o) for p, o in zip(s.p_cap, s.caps) if p in used]
    dropped = len(outs) - len(kept_c) - len(kept_y) + (len(s.p_x) - len(slices)) + (len(s.p_cap) - len(caps))
    if not dropped:
        return graph, 0
    outputs = [outs[c] for c in sorted(kept_c)] + [outs[k] for k in kept_y]
    return s.rebuilt(carries, slices, caps, outputs, replace={}), dropped


# ------------------------------------------------------------------ hoisting
def hoist(graph, i):
    s = ScanParts(graph, i)
    bg, length = s.bg, s.node.attrs["length"]
    on_carry = _depends(bg, s.p_carry)
    outer = _whole(graph, s) | dict(zip(s.p_cap, s.caps))
    stacked = set(outer) & set(s.p_x)
    if s.node.attrs.get("checkpoint") is not None:
        # (a loop that trades time for memory: no per-step work becomes a stack of all steps' results)
        outer = {p: o for p, o in outer.items() if p not in stacked}
        stacked = set()
    before, moved = [], []
    lengths = _Lengths(graph, s, stacked)
    for j, node in bg.nodes.items():
        if j in outer or j in on_carry or not node.inputs:
            continue
        made = _outside(bg, node, outer, stacked, length, before, lengths)
        if made is not None:
            outer[j] = made
            moved.append(j)
            if any(x in stacked for x in node.inputs):
                lengths.track(j, node.inputs, stacked)
                stacked.add(j)
    frontier = _frontier(bg, moved)
    if not frontier:
        return graph, 0
    body_nodes = dict(bg.nodes)
    new_slices, new_caps = [], []
    for j in frontier:
        n = bg.nodes[j]
        body_nodes[j] = Node("placeholder", (), None, n.shape, n.dtype, name=n.name, role=n.role, source=n.source,
                             scope=n.scope, id=j)
        (new_slices if j in stacked else new_caps).append((j, outer[j]))
    s.bg = Graph(body_nodes, bg.outputs, (), bg.inputs)
    carries = list(zip(s.p_carry, s.init))
    slices = list(zip(s.p_x, s.xs)) + new_slices
    caps = list(zip(s.p_cap, s.caps)) + new_caps
    return s.rebuilt(carries, slices, caps, list(bg.outputs), before=before), len(moved)


def _frontier(bg, moved):
    """The moved nodes some node left in the body (or the body's outputs) reads."""
    moved_set = set(moved)
    read = set(bg.outputs)
    for j, n in bg.nodes.items():
        if j not in moved_set:
            read.update(n.inputs)
    return [j for j in moved if j in read]


def _outside(bg, node, outer, stacked, length, before, lengths):
    """The id of ``node`` computed outside the loop (appending what that makes to ``before``), or None."""
    ins = []
    for x in node.inputs:
        if x in outer:
            ins.append(outer[x])
        elif bg.nodes[x].op == "constant":
            c = _constant(bg.nodes[x])
            before.append(c)
            outer[x] = c.id
            ins.append(c.id)
        else:
            return None
    flags = [x in stacked for x in node.inputs]
    if not any(flags):
        n = new_node(node, node.op, ins, node.attrs, node.shape)
        before.append(n)
        return n.id
    rule = REGISTRY[node.op].batch
    ruled = rule(node.attrs, [bg.nodes[x].shape for x in node.inputs], flags) if rule is not None else None
    if ruled is None:
        return None
    attrs, lifts = ruled
    ins = lengths.checked(node.inputs, ins, stacked, before)
    ins = [_lifted(bg.nodes[x], o, lift, length, before) for x, o, lift in zip(node.inputs, ins, lifts)]
    n = new_node(node, node.op, ins, attrs, (length,) + tuple(node.shape))
    before.append(n)
    return n.id


class _Lengths:
    """Which of a scan's xs each stacked value hoisted out of it is computed from. Work hoisted out of the
    loop runs before the scan checks its xs' lengths: where it combines xs whose lengths are not known to
    agree, it reads its operand through a ``same_length`` check of them (the scan's line and message, and
    nothing to run once a plan knows the sizes), not a broadcast failing in the user's op."""

    def __init__(self, graph, s, stacked):
        self.graph, self.scan, self.body = graph, s.node, s.bg
        self.of = {p: frozenset([o]) for p, o in zip(s.p_x, s.xs) if p in stacked}

    def _xs(self, inputs, stacked):
        return frozenset().union(*(self.of[x] for x in inputs if x in stacked))

    def track(self, j, inputs, stacked):
        self.of[j] = self._xs(inputs, stacked)

    def checked(self, inputs, ins, stacked, before):
        """``ins`` (the outer operands of body inputs ``inputs``), one read through a check where needed."""
        xs = self._xs(inputs, stacked)
        known = {self.graph.nodes[o].shape[0] for o in xs}
        if len(xs) < 2 or (len(known) == 1 and None not in known):
            return ins
        # (the operand computed from the most xs; from all of them, it was made after their check)
        k = max((k for k, x in enumerate(inputs) if x in stacked), key=lambda k: len(self.of[inputs[k]]))
        if self.of[inputs[k]] == xs:
            return ins
        first, length = self.body.nodes[inputs[k]], self.scan.attrs["length"]
        check = new_node(self.scan, "same_length", [ins[k], *sorted(xs - self.of[inputs[k]])], {"length": length},
                         (length,) + tuple(first.shape), first.dtype)
        before.append(check)
        return ins[:k] + [check.id] + ins[k + 1:]


def _constant(n):
    return Node("constant", (), None, n.shape, n.dtype, role=n.role, value=n.value, source=n.source, scope=n.scope)


def _lifted(body_node, outer_id, lift, length, before):
    if not lift:
        return outer_id
    axes = tuple(range(1, 1 + lift))
    shape = (length,) + (1,) * lift + tuple(body_node.shape)
    n = new_node(body_node, "expand_dims", [outer_id], {"axis": axes}, shape)
    before.append(n)
    return n.id


# ------------------------------------------------------------------ sinking running sums
def sink(graph, i):
    s = ScanParts(graph, i)
    if s.node.attrs.get("checkpoint") is not None:
        return graph, 0         # (the sums stay in the loop: stacking their terms is the memory it saves)
    bg, length = s.bg, s.node.attrs["length"]
    users = bg.consumers()
    outs = list(bg.outputs)
    sums = {}
    for c in range(s.C):
        term = _summed_term(bg, users, outs, s.p_carry[c], outs[c])
        if term is not None:
            sums[c] = term
    if not sums:
        return graph, 0
    before_ys = len(outs) - s.C
    new_ys, after, replace, moved = [], [], {}, 0
    outer = _whole(graph, s) | dict(zip(s.p_cap, s.caps))
    stacked = set(outer) & set(s.p_x)
    for c, (term, region) in sums.items():
        made = _sunk(bg, s, term, region, outer, stacked, new_ys, length, after)
        if made is None:
            continue
        add = bg.nodes[outs[c]]
        known = dict(graph.nodes) | {r.id: r for _, r in new_ys}
        total = _summed_over_steps(add, made, after, known)
        final = new_node(add, "add", [s.init[c], total.id], {}, add.shape)
        after += [total, final]
        replace[c] = final.id
        moved += len(region)
    if not replace:
        return graph, 0
    kept = [c for c in range(s.C) if c not in replace]
    carries = [(s.p_carry[c], s.init[c]) for c in kept]
    outputs = [outs[c] for c in kept] + outs[s.C:] + [j for j, _ in new_ys]
    readers = []
    for k, (_, reader) in enumerate(new_ys):
        reader.attrs = {"index": len(kept) + before_ys + k}
        readers.append(reader)
    return s.rebuilt(carries, list(zip(s.p_x, s.xs)), list(zip(s.p_cap, s.caps)), outputs,
                     after=readers + after, replace=replace), moved


def _summed_term(bg, users, outs, param, out):
    """(the term, the body nodes computing only it) if carry ``param`` only sums a term per step:
    its next value is ``param + term``, read by nothing else, and ``param`` is read by nothing else."""
    node = bg.nodes[out]
    if node.op != "add" or users[param] != [out] or users[out] or outs.count(out) != 1 or param in outs:
        return None
    a, b = node.inputs
    term = b if a == param else a
    if term == param or param not in node.inputs or not bg.nodes[term].inputs:
        return None
    region, stack = [], [term]
    while stack:        # the nodes that feed only the term (each read by nothing but the region)
        j = stack.pop()
        n = bg.nodes[j]
        if j in region or not n.inputs or j in bg.inputs or outs.count(j):
            continue
        readers = users[j]
        if j != term and any(r not in region for r in readers):
            continue
        if j == term and readers != [out]:
            return None
        region.append(j)
        stack.extend(n.inputs)
    # (no region: the term is itself a body output or input, made by no node the sum could take along)
    return (term, sorted(region, key=list(bg.nodes).index)) if region else None


def _sunk(bg, s, term, region, outer, stacked, new_ys, length, after):
    """The id of the stacked terms computed after the loop from stacked body values (``new_ys`` gains the
    body values to stack: (body id, the loop_output node that will read them)), or None."""
    local = dict(outer)
    local_stacked = set(stacked)
    for j in region:
        node = bg.nodes[j]
        for x in node.inputs:
            if x in local:
                continue
            if bg.nodes[x].op == "constant":
                c = _constant(bg.nodes[x])
                after.append(c)
                local[x] = c.id
                continue
            if x in bg.inputs:
                return None         # (a slice kept as checkpoints: the sum stays in the loop)
            known = next((o.id for b, o in new_ys if b == x), None)
            if known is None:
                n = bg.nodes[x]     # (its index is set once the loop's values are known)
                reader = Node("loop_output", [s.i], {"index": None}, (length,) + tuple(n.shape), n.dtype,
                              role=n.role, source=n.source)
                new_ys.append((x, reader))
                known = reader.id
            local[x] = known
            local_stacked.add(x)
        flags = [x in local_stacked for x in node.inputs]
        rule = REGISTRY[node.op].batch
        ruled = rule(node.attrs, [bg.nodes[x].shape for x in node.inputs], flags) if rule and any(flags) else None
        if ruled is None:
            return None
        attrs, lifts = ruled
        ins = [_lifted(bg.nodes[x], local[x], lift, length, after) for x, lift in zip(node.inputs, lifts)]
        n = new_node(node, node.op, ins, attrs, (length,) + tuple(node.shape))
        after.append(n)
        local[j] = n.id
        local_stacked.add(j)
    return local[term]


def _summed_over_steps(add, made, after, outer):
    """The sum over the steps axis of the stacked terms ``made``: one matrix product when they are matrix
    products (sum_t a_t @ b_t = [a_1 ... a_T] @ [b_1; ...; b_T]), else a sum. (``outer``: the graph's
    nodes, the stacked operands among them.)"""
    nodes = dict(outer) | {n.id: n for n in after}
    term = nodes.get(made)
    if term is not None and term.op == "matmul" and len(term.shape) == 3:
        a, b = (nodes.get(x) for x in term.inputs)
        if a is not None and b is not None and len(a.shape) == 3 and len(b.shape) == 3 and a.shape[1] is not None \
                and b.shape[2] is not None:
            a, b = _unshifted(a, b, add, after, nodes)
            left = _rows_first(a, add, after)
            right = new_node(add, "reshape", [b.id], {"shape": (-1, b.shape[2])}, (None, b.shape[2]))
            after.append(right)
            return new_node(add, "matmul", [left, right.id], {}, add.shape)
    return new_node(add, "sum", [made], {"axis": (0,), "keepdims": False}, add.shape)


_ALL_BUT_LAST, _ALL_BUT_FIRST = (slice(None, -1, None),), (slice(1, None, None),)


def _unshifted(a, b, add, after, nodes):
    """(a, b) for the sum over steps of a_t @ b_t, without the copy of a stack of carries shifted by a
    step. A carry's gradient reads the carry each step starts with: the loop's first carry, then its ys
    but the last (``scan._carries_before``: a concatenation, then a slice). Where that first carry is a
    constant zero its product adds nothing, and the sum is that of ys[:-1]'s transposes times b[1:] (or,
    for a loop run backwards, ys[1:]'s times b[:-1]): views of arrays the loops made, no concatenation.
    Anything else is returned as it is."""
    shifted = nodes.get(a.inputs[0]) if a.op == "transpose" and a.attrs["axes"] == (0, 2, 1) else None
    if shifted is None or shifted.op != "getitem" or shifted.attrs["index"] not in (_ALL_BUT_LAST, _ALL_BUT_FIRST):
        return a, b
    joined = nodes.get(shifted.inputs[0])
    if joined is None or joined.op != "concatenate" or joined.attrs.get("axis") != 0 or len(joined.inputs) != 2:
        return a, b
    forward = shifted.attrs["index"] == _ALL_BUT_LAST
    first, ys = (nodes.get(x) for x in (joined.inputs if forward else joined.inputs[::-1]))
    if first is None or ys is None or first.op != "constant" or first.shape[:1] != (1,) or np.any(first.value):
        return a, b
    kept, rest = (_ALL_BUT_LAST, _ALL_BUT_FIRST) if forward else (_ALL_BUT_FIRST, _ALL_BUT_LAST)
    rows = new_node(add, "getitem", [ys.id], {"index": kept}, (None,) + tuple(ys.shape[1:]))
    flipped = new_node(add, "transpose", [rows.id], {"axes": (0, 2, 1)}, (None,) + tuple(a.shape[1:]))
    later = new_node(add, "getitem", [b.id], {"index": rest}, (None,) + tuple(b.shape[1:]))
    after += [rows, flipped, later]
    return flipped, later


def _rows_first(a, add, after):
    """The (n, T*k) matrix [a_1 ... a_T] of stacked (n, k) matrices ``a``: a transposed view where ``a`` is
    the stacked transposes of (k, n) matrices (the common case: a weight gradient's x_t.T)."""
    n = a.shape[1]
    if a.op == "transpose" and a.attrs["axes"] == (0, 2, 1):
        flat = new_node(add, "reshape", [a.inputs[0]], {"shape": (-1, n)}, (None, n))
        flipped = new_node(add, "transpose", [flat.id], {"axes": (1, 0)}, (n, None))
        after += [flat, flipped]
        return flipped.id
    moved = new_node(add, "transpose", [a.id], {"axes": (1, 0, 2)}, (n, a.shape[0], a.shape[2]))
    flat = new_node(add, "reshape", [moved.id], {"shape": (n, -1)}, (n, None))
    after += [moved, flat]
    return flat.id


def new_node(like, op, inputs, attrs, shape, dtype=None):
    """An outer node made for body node ``like`` (its role, line, scope and name)."""
    return Node(op, inputs, attrs, shape, like.dtype if dtype is None else dtype, name=None, role=like.role,
                source=like.source, scope=like.scope, rule=like.rule)
