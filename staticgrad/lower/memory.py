"""Memory planning: every intermediate's lifetime over the schedule, and a workspace reused call after call.

A plan knows every intermediate's shape, so it can (1) compute each value's lifetime over the schedule,
(2) give short-lived results a slot in a workspace allocated once per plan and reused call after call
(numpy ``out=``), including in place over an operand that dies at that very step, and (3) say how many
bytes of intermediates are live at the peak, with and without this planning.
"""
from __future__ import annotations

import math

import numpy as np

from ..ops.registry import C_ORDER, ELEMENTWISE, INPLACE, OUT, REGISTRY, VIEW, is_a
from ..tensor import LEAVES


def nbytes(shape, dtype) -> int:
    return math.prod(shape) * np.dtype(dtype).itemsize


class MemoryPlan:
    """Where each intermediate lives: ``slot[node]`` is a workspace slot index, or absent (fresh array)."""

    def __init__(self):
        self.slot = {}            # node id -> slot index
        self.slots = []           # slot index -> (shape, dtype)
        self.peak_planned = 0     # bytes: workspace + stacked buffers + fresh intermediates live at once,
        #                           at the worst step
        self.peak_unplanned = 0   # bytes: every intermediate kept until the call returns
        self.inplace = 0          # results written over an operand that died at that step
        self.fixed_out = {}       # node id -> the buffer its kernel writes into (batched rows)
        self.handoff = {}         # update index -> slot whose buffer becomes the parameter's new value
        self.workspace_bytes = 0  # allocated once per plan and kept: the slots and the stacked buffers
        self.scratch = {}         # node id -> slot indices of the temporaries its kernel needs (OpDef.scratch)

    def key(self, node_id):
        return self.slots[self.slot[node_id]]


def single_pass(node) -> bool:
    """An elementwise op whose kernel may write over its own operands."""
    return is_a(node, ELEMENTWISE) and is_a(node, INPLACE)


def permuted_values(graph, order) -> set:
    """Values whose axes may lie reordered in memory: a result its op says it permutes (a transpose, an
    advanced index: numpy may put the indexed axes first), and what numpy makes from such an operand (its
    fresh results follow the operand's layout, order "K"; stack and concatenate too), unless the op makes a
    C-ordered result whatever its operands (a matrix product).

    Written into a C-ordered buffer instead (an out= slot, a row of a batched buffer), such a value keeps
    its numbers but not their order in memory, and a later sum adds in another order than without
    planning (a last-bit difference).
    """
    nodes, permuted = graph.nodes, set()
    for i in order:
        node = nodes[i]
        if node.op in LEAVES:
            continue
        opdef = REGISTRY[node.op]
        if permuted and any(j in permuted for j in node.inputs):      # (most plans permute nothing)
            if not opdef.has(C_ORDER):
                permuted.add(i)
        elif opdef.permutes is not None and opdef.permutes(node.attrs):
            permuted.add(i)
    return permuted


def storage_bases(graph, order) -> dict:
    """{node id: the node whose memory it lives in}: views share their input's."""
    base = {}
    for i in order:
        node = graph.nodes[i]
        view = is_a(node, VIEW)
        base[i] = base[node.inputs[0]] if view else i
    return base


def plan_memory(graph, order, shapes, enable=True, fixed_out=None, held=0) -> MemoryPlan:
    """Lifetimes and workspace slots for ``graph`` in ``order``; nodes in ``fixed_out`` already have
    their own buffer (batching's stacked rows) and take no part in the slot pool. ``held`` bytes of such
    buffers are live for the whole call: both peaks count them (they hold what would otherwise be
    intermediates of their own)."""
    planner = _Planner(graph, order, shapes, enable, fixed_out, held)
    for step, i in enumerate(order):
        planner.visit(step, i)
    planner.plan.workspace_bytes = planner.workspace
    return planner.plan


class _Planner:
    """One pass over the schedule, handing out workspace slots as values are made and freed."""

    def __init__(self, graph, order, shapes, enable, fixed_out, held):
        self.nodes, self.shapes, self.enable = graph.nodes, shapes, enable
        self.plan = plan = MemoryPlan()
        # (the caller's dict, not a copy: nothing writes to it once planning starts, and a huge plan's
        # batched rows fill millions of entries)
        plan.fixed_out = fixed_out if fixed_out is not None else {}
        self.base = storage_bases(graph, order)
        # Elementwise ops over these get no C-ordered out= buffer (``usable``).
        self.permuted = permuted_values(graph, order)
        self.escaping, last = self._lifetimes(graph, order)
        self.handing = handoff_candidates(graph, self.base, shapes) if enable else {}
        self.free = {}                     # (shape, dtype) -> [slot indices]
        self.dying_at = {}                 # step -> storage bases whose last use is that step
        for b, step in last.items():
            if self.base.get(b) == b:
                self.dying_at.setdefault(step, []).append(b)
        self.live_fresh, self.workspace, self.sizes = 0, held, {}
        self.scratched = set()             # slots some node used for its kernel's temporaries
        plan.peak_unplanned = plan.peak_planned = held

    def _lifetimes(self, graph, order):
        """(values that outlive the call, {value: the last step that reads it})."""
        base, last = self.base, {}
        nodes = graph.nodes
        for step, i in enumerate(order):
            for j in nodes[i].inputs:
                last[base[j]] = step
                last[j] = step
                # A value that reads others when it is read (a checkpointed loop's rows, recomputed from
                # the loop's inputs) keeps them alive as long as itself.
                meta = nodes[j].meta          # (None for almost every value: no empty dict made per read)
                if meta:
                    for h in meta.get("holds", ()):
                        last[base[h]] = max(last.get(base[h], step), step)
        escaping = set()
        for i in list(graph.outputs) + [e for _, e in graph.updates]:
            escaping.add(base[i])
            last[base[i]] = last[i] = len(order)
        return escaping, last

    def release(self, slot_of):
        self.free.setdefault(self.plan.slots[slot_of], []).append(slot_of)

    def visit(self, step, i):
        node, plan = self.nodes[i], self.plan
        if node.op in LEAVES or self.base[i] != i or i in plan.fixed_out:
            # No slot for this one, but what its step ends is free again (a batched node writes its own
            # buffer, so the operands' slots can go to later nodes).
            for b in self.dying_at.get(step, ()):
                if b in plan.slot:
                    self.release(plan.slot[b])
                elif b in self.sizes and b not in self.escaping:
                    self.live_fresh -= self.sizes[b]
            return
        # (a checkpointed loop's rows, recomputed when read, take a segment's rows, not the whole stack)
        meta = node.meta      # (None for almost every node: no empty dict made per node)
        size = 0 if meta and meta.get("holds") else nbytes(self.shapes[i], node.dtype)
        self.sizes[i] = size
        plan.peak_unplanned += size
        dying = [b for b in self.dying_at.get(step, ()) if b in plan.slot]
        taken = self._place(i, node, size, dying)
        plan.peak_planned = max(plan.peak_planned, self.workspace + self.live_fresh)
        for b in self.dying_at.get(step, ()):
            if b not in plan.slot and b in self.sizes and b not in self.escaping:
                self.live_fresh -= self.sizes[b]
        return taken

    def _place(self, i, node, size, dying):
        """Give ``node`` a slot (or none), and free its dying operands' slots; returns the slot handed over
        to a parameter, if any."""
        plan = self.plan
        scratch = self._scratch(i, node)
        key = (tuple(self.shapes[i]), node.dtype.str)     # dtype.str: hashing dtype objects is slow
        elementwise, out = single_pass(node), is_a(node, OUT)
        # numpy lays a fresh elementwise result out like its operands (order "K"); an out= buffer is
        # C-ordered. For an operand with reordered axes that changes the order a later reduction adds in.
        usable = (self.enable and i not in self.escaping and out
                  and not (elementwise and any(j in self.permuted for j in node.inputs)))
        if usable and elementwise:
            for b in dying:          # an operand that dies here can take the result in place
                self.release(plan.slot[b])
        taken = None
        if i in self.handing and elementwise and out:
            # A new parameter value written over a dying operand of its own shape: that buffer is still
            # in cache, and after the call it belongs to the parameter (Function puts the old parameter
            # array into the slot instead). Escaping, the slot is not freed again.
            # (never a slot that was some step's scratch: the generated code holds those arrays by value)
            taken = next((plan.slot[b] for b in dying if plan.key(b) == key and plan.slot[b] not in self.scratched),
                         None)
        if taken is not None:
            plan.slot[i] = taken
            plan.handoff[self.handing[i]] = taken
            plan.inplace += 1
        elif usable and self.free.get(key):
            plan.slot[i] = self.free[key].pop()
            if elementwise and any(plan.slot.get(b) == plan.slot[i] for b in dying):
                plan.inplace += 1
        elif usable:
            plan.slot[i] = len(plan.slots)
            plan.slots.append(key)
            self.workspace += size
        else:
            self.live_fresh += size
        if not (usable and elementwise):
            for b in dying:
                if plan.slot[b] != taken:
                    self.release(plan.slot[b])
        for k in scratch:        # (taken before the operands were freed: a temporary never aliases one)
            self.release(k)
        return taken

    def _scratch(self, i, node):
        """Slots for the temporaries ``node``'s kernel asks for, live during its step only."""
        opdef = REGISTRY[node.op]
        needs = opdef.scratch(node, self.shapes) if self.enable and opdef.scratch is not None else None
        if not needs:
            return []
        taken = []
        for shape, dtype in needs:
            key = (tuple(shape), np.dtype(dtype).str)
            if self.free.get(key):
                taken.append(self.free[key].pop())
            else:
                taken.append(len(self.plan.slots))
                self.plan.slots.append(key)
                self.workspace += nbytes(shape, dtype)
        self.plan.scratch[i] = taken
        self.scratched.update(taken)
        self.plan.peak_planned = max(self.plan.peak_planned, self.workspace + self.live_fresh)
        return taken


def handoff_candidates(graph, base, shapes):
    """Update values that may take a workspace buffer: node id -> update index.

    Each must be the new value of exactly one parameter, have its shape and dtype, own its storage and
    not be returned, nor viewed by an output (the caller would then hold the parameter's array).
    """
    nodes, returned = graph.nodes, {base.get(o, o) for o in graph.outputs}     # outputs and what they view
    counts = {}
    for _, e in graph.updates:
        counts[e] = counts.get(e, 0) + 1
    found = {}
    for k, (p, e) in enumerate(graph.updates):
        if (counts[e] == 1 and e not in returned and base.get(e) == e and nodes[e].op not in LEAVES
                and tuple(shapes[e]) == tuple(nodes[p].shape) and nodes[e].dtype == nodes[p].dtype):
            found[e] = k
    return found
