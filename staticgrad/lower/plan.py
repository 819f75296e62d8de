"""Execution plans: the graph specialized to the concrete shapes of one call, with its memory planned.

A plan knows every intermediate's shape, so it can (1) compute each value's lifetime over the schedule,
(2) give short-lived results a slot in a workspace allocated once per plan and reused call after call
(numpy ``out=``), including in place over an operand that dies at that very step, and (3) say how many
bytes of intermediates are live at the peak, with and without this planning.
"""
from __future__ import annotations

import math

import numpy as np

from ..ops.registry import ELEMENTWISE, REGISTRY, VIEW
from ..tensor import FeedError, ShapeError, format_shape

REDUCTIONS_WITH_OUT = {"sum", "max", "min"}
LEAVES = ("placeholder", "parameter", "constant")


class _Spec:
    """What a shape rule reads of an input: shape, dtype, ndim."""

    __slots__ = ("shape", "dtype", "ndim")

    def __init__(self, shape, dtype):
        self.shape, self.dtype, self.ndim = tuple(shape), dtype, len(shape)


def concrete_shapes(graph, order, feed_shapes, feed_dtypes=None) -> dict:
    """Every node's shape for these placeholder shapes (the static rules run again on exact sizes)."""
    specs = {}
    feed_dtypes = feed_dtypes or [None] * len(feed_shapes)
    for node_id, shape, given in zip(graph.inputs, feed_shapes, feed_dtypes):
        node = graph.nodes[node_id]
        if len(shape) != len(node.shape) or any(d is not None and d != s for d, s in zip(node.shape, shape)):
            given = f" (dtype {given})" if given is not None else ""
            raise FeedError(f"placeholder {node.label()!r}: expected shape {format_shape(node.shape)} (dtype "
                            f"{node.dtype}), got shape {format_shape(shape)}{given}")
        specs[node_id] = _Spec(shape, node.dtype)
    for i in order:
        node = graph.nodes[i]
        if i in specs:
            continue
        if node.op in LEAVES or (None not in node.shape and all(None not in graph.nodes[j].shape
                                                                 for j in node.inputs)):
            specs[i] = _Spec(node.shape, node.dtype)     # static shapes without unknowns are exact
            continue
        # Also where the result's shape is static: inputs sized by different feeds must still agree (the
        # logits and labels of a loss fed 3 rows and 4 labels).
        try:
            shape, dtype = REGISTRY[node.op].infer([specs[j] for j in node.inputs], **node.attrs)
        except ShapeError as err:
            sizes = ", ".join(format_shape(specs[j].shape) for j in node.inputs)
            fed = ", ".join(f"{graph.nodes[j].label()!r} {format_shape(s)}" for j, s in zip(graph.inputs, feed_shapes)
                            if None in graph.nodes[j].shape)
            raise ShapeError(f"{node.op} (built at {node.source}): {err}; the sizes fed ({fed}) give inputs of "
                             f"shapes {sizes}") from None
        specs[i] = _Spec(shape, node.dtype)
    return {i: s.shape for i, s in specs.items()}


def elementwise_ufunc(kernel) -> bool:
    """A ufunc that maps elements to elements (np.matmul is a ufunc too, but a generalized one)."""
    return isinstance(kernel, np.ufunc) and kernel.signature is None


def inplace_safe(op) -> bool:
    """Whether the kernel may write its result over one of its own operands (a single-pass ufunc)."""
    kernel = REGISTRY[op].kernel
    return elementwise_ufunc(kernel) or getattr(kernel, "inplace_safe", False)


def _single_pass(op) -> bool:
    """An elementwise op whose kernel may write over its own operands."""
    return op in REGISTRY and REGISTRY[op].has(ELEMENTWISE) and inplace_safe(op)


def accepts_out(op) -> bool:
    kernel = REGISTRY[op].kernel
    return isinstance(kernel, np.ufunc) or op in REDUCTIONS_WITH_OUT or getattr(kernel, "accepts_out", False)


def nbytes(shape, dtype) -> int:
    return math.prod(shape) * np.dtype(dtype).itemsize


class MemoryPlan:
    """Where each intermediate lives: ``slot[node]`` is a workspace slot index, or absent (fresh array)."""

    def __init__(self):
        self.slot = {}            # node id -> slot index
        self.slots = []           # slot index -> (shape, dtype)
        self.free_after = {}      # step -> [node ids whose value may be dropped after that step]
        self.peak_planned = 0     # bytes: workspace + stacked buffers + fresh intermediates live at once,
        #                           at the worst step
        self.peak_unplanned = 0   # bytes: every intermediate kept until the call returns
        self.inplace = 0          # results written over an operand that died at that step
        self.fixed_out = {}       # node id -> the buffer its kernel writes into (batched rows)
        self.handoff = {}         # update index -> slot whose buffer becomes the parameter's new value
        self.workspace_bytes = 0  # allocated once per plan and kept: the slots and the stacked buffers


def permuted_values(graph, order) -> set:
    """Values whose axes may lie reordered in memory: a transpose, an advanced index (numpy may put the
    indexed axes first), and what numpy makes from such an operand (its fresh results follow the
    operand's layout, order "K"; stack and concatenate too), except a matrix product, which is C-ordered.

    Written into a C-ordered buffer instead (an out= slot, a row of a batched buffer), such a value keeps
    its numbers but not their order in memory, and a later sum adds in another order than without
    planning (a last-bit difference).
    """
    nodes, permuted = graph.nodes, set()
    for i in order:
        node = nodes[i]
        if any(j in permuted for j in node.inputs):
            if node.op != "matmul":
                permuted.add(i)
        elif node.op == "transpose" and list(node.attrs["axes"]) != sorted(node.attrs["axes"]):
            permuted.add(i)
        elif node.op == "getitem" and any(isinstance(k, np.ndarray) for k in node.attrs["index"]):
            permuted.add(i)
    return permuted


def plan_memory(graph, order, shapes, enable=True, fixed_out=None, held=0) -> MemoryPlan:
    """Lifetimes and workspace slots for ``graph`` in ``order``; nodes in ``fixed_out`` already have
    their own buffer (batching's stacked rows) and take no part in the slot pool. ``held`` bytes of such
    buffers are live for the whole call: both peaks count them (they hold what would otherwise be
    intermediates of their own)."""
    nodes = graph.nodes
    plan = MemoryPlan()
    plan.fixed_out = dict(fixed_out or {})
    # Views share their input's memory: a value's storage lives as long as any view of it.
    base = {}
    for i in order:
        node = nodes[i]
        view = REGISTRY.get(node.op) and REGISTRY[node.op].has(VIEW)
        base[i] = base[node.inputs[0]] if view else i
    # Elementwise ops over these get no C-ordered out= buffer below (``usable``).
    permuted = permuted_values(graph, order)
    last = {}
    for step, i in enumerate(order):
        for j in nodes[i].inputs:
            last[base[j]] = step
            last[j] = step
    end = len(order)
    escaping = set()
    for i in list(graph.outputs) + [e for _, e in graph.updates]:
        escaping.add(base[i])
        last[base[i]] = end
        last[i] = end
    for step, i in enumerate(order):
        plan.free_after.setdefault(last.get(i, step), []).append(i)
    handing = _handoff_candidates(graph, base, shapes) if enable else {}

    free = {}                     # (shape, dtype) -> [slot indices]
    dying_at = {}                 # step -> storage bases whose last use is that step
    for b, step in last.items():
        if base.get(b) == b:
            dying_at.setdefault(step, []).append(b)
    live_fresh = 0
    workspace = held
    plan.peak_unplanned = plan.peak_planned = held
    sizes = {}
    for step, i in enumerate(order):
        node = nodes[i]
        if node.op in LEAVES or base[i] != i or i in plan.fixed_out:
            # No slot for this one, but what its step ends is free again (a batched node writes its own
            # buffer, so the operands' slots can go to later nodes).
            for b in dying_at.get(step, ()):
                if b in plan.slot:
                    free.setdefault(slot_key(plan, b), []).append(plan.slot[b])
                elif b in sizes and b not in escaping:
                    live_fresh -= sizes[b]
            continue
        size = nbytes(shapes[i], node.dtype)
        sizes[i] = size
        plan.peak_unplanned += size
        key = (tuple(shapes[i]), node.dtype.str)     # dtype.str: hashing dtype objects is slow
        dying = [b for b in dying_at.get(step, ()) if b in plan.slot]
        elementwise = _single_pass(node.op)
        # numpy lays a fresh elementwise result out like its operands (order "K"); an out= buffer is
        # C-ordered. For an operand with reordered axes that changes the order a later reduction adds in.
        usable = (enable and i not in escaping and accepts_out(node.op)
                  and not (elementwise and any(j in permuted for j in node.inputs)))
        if usable and elementwise:
            # An operand that dies here can take the result in place (ufuncs handle exact overlap).
            for b in dying:
                free.setdefault(slot_key(plan, b), []).append(plan.slot[b])
        taken = None
        if i in handing and elementwise and accepts_out(node.op):
            # A new parameter value written over a dying operand of its own shape: that buffer is still
            # in cache, and after the call it belongs to the parameter (Function._assign puts the old
            # parameter array into the slot instead). Escaping, the slot is not freed again.
            taken = next((plan.slot[b] for b in dying if slot_key(plan, b) == key), None)
        if taken is not None:
            plan.slot[i] = taken
            plan.handoff[handing[i]] = taken
            plan.inplace += 1
        elif usable and free.get(key):
            plan.slot[i] = free[key].pop()
            if elementwise and any(plan.slot.get(b) == plan.slot[i] for b in dying):
                plan.inplace += 1
        elif usable:
            plan.slot[i] = len(plan.slots)
            plan.slots.append(key)
            workspace += size
        else:
            live_fresh += size
        if not (usable and elementwise):
            for b in dying:
                if plan.slot[b] != taken:
                    free.setdefault(slot_key(plan, b), []).append(plan.slot[b])
        plan.peak_planned = max(plan.peak_planned, workspace + live_fresh)
        for b in dying_at.get(step, ()):
            if b not in plan.slot and b in sizes and b not in escaping:
                live_fresh -= sizes[b]
    plan.workspace_bytes = workspace
    return plan


def _handoff_candidates(graph, base, shapes):
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


def slot_key(plan, node_id):
    return plan.slots[plan.slot[node_id]]


def skip_identities(graph, order):
    """``graph`` and ``order`` without the nodes a plan need not run.

    Identity nodes (``stop_gradient``: at these sizes, e.g., a gradient that needs no reduction back to
    its input's shape) are skipped: their readers read the source instead, so no call is made for them
    and the chains through them stay visible to batching and scans. One that is returned, or an update,
    stays. Nodes nothing reads any more are dropped too: :func:`specialize` gives readers of a shape the
    concrete one, so a value kept only for its shape (the ``x @ W`` whose gradient is broadcast back to
    its shape) is not computed. Placeholders and parameters stay: the call still takes them.
    """
    nodes = graph.nodes
    keep = set(graph.outputs) | {i for pair in graph.updates for i in pair}
    alias, kept = {}, {}
    for i in order:
        node = nodes[i]
        if alias and any(j in alias for j in node.inputs):
            node = node.copy(inputs=[alias.get(j, j) for j in node.inputs])
        if node.op == "stop_gradient" and i not in keep:
            alias[i] = node.inputs[0]
            continue
        kept[i] = node
    read = set(keep)
    for i in reversed(order):
        if i in kept and i in read:
            read.update(kept[i].inputs)
    dead = [i for i in kept if i not in read and kept[i].op not in ("placeholder", "parameter")]
    if not alias and not dead:
        return graph, order
    for i in dead:
        del kept[i]
    from ..graph import Graph
    return Graph(kept, graph.outputs, graph.updates, graph.inputs), [i for i in order if i in kept]


def specialize(graph, order, shapes):
    """Copies of the nodes that read an input only for its shape, rewritten to use the known shape.

    Dropping those reads ends the referenced values' lifetimes earlier (less memory held).
    Returns {node id: node} for the whole order (unchanged nodes are shared, not copied).
    """
    nodes = {}
    for i in order:
        node = graph.nodes[i]
        op, shape = node.op, shapes[i]
        if op == "broadcast_like":
            if tuple(shapes[node.inputs[0]]) == tuple(shape):      # nothing to stretch at these sizes
                node = node.copy(op="stop_gradient", inputs=node.inputs[:1], attrs={})
            else:
                node = node.copy(op="broadcast_to", inputs=node.inputs[:1], attrs={"shape": tuple(shape)})
        elif op == "reshape_like":
            node = node.copy(op="reshape", inputs=node.inputs[:1], attrs={"shape": tuple(shape)})
        elif op in ("size", "zeros_like"):
            kernel = REGISTRY[op].kernel
            dummy = np.broadcast_to(np.zeros((), np.int8), shapes[node.inputs[0]])
            value = np.asarray(kernel(dummy, **node.attrs), dtype=node.dtype)
            value.setflags(write=False)
            node = node.copy(op="constant", inputs=[], attrs={}, value=value, shape=value.shape)
        elif op == "getitem_grad" and len(node.inputs) > 1:
            node = node.copy(inputs=node.inputs[:1], attrs={"index": node.attrs["index"], "shape": tuple(shape)})
        elif op == "sum_like":
            from ..ops.reduce import unstretched_axes
            lead, kept = unstretched_axes(shapes[node.inputs[0]], shapes[node.inputs[1]])
            if not lead and not kept:    # nothing was stretched at these sizes: the gradient passes as is
                node = node.copy(op="stop_gradient", inputs=node.inputs[:1], attrs={})
            elif not (lead and kept) and node.dtype.kind in "fc":
                # the one np.sum the kernel would make, with the axes known now: the reference is not
                # read (integers are left alone: np.sum widens them, sum_like keeps g's dtype)
                node = node.copy(op="sum", inputs=node.inputs[:1], attrs={"axis": lead or kept,
                                                                          "keepdims": not lead})
        elif node.inputs and REGISTRY[op].has(ELEMENTWISE) and all(nodes[j].op == "constant" for j in node.inputs) \
                and math.prod(shape) <= 64:
            # Constants made from run-time sizes (1/N of a mean's gradient) fold once per plan.
            with np.errstate(all="ignore"):
                value = np.asarray(REGISTRY[op].kernel(*(nodes[j].value for j in node.inputs), **node.attrs),
                                   dtype=node.dtype)
            value.setflags(write=False)
            node = node.copy(op="constant", inputs=[], attrs={}, value=value, shape=value.shape)
        elif op == "split":
            axis, part = node.attrs["axis"], node.attrs["part"]
            refs = node.inputs[1:]
            start = sum(shapes[r][axis] for r in refs[:part])
            index = (slice(None),) * axis + (slice(start, start + shapes[refs[part]][axis]),)
            node = node.copy(op="getitem", inputs=node.inputs[:1], attrs={"index": index})
        nodes[i] = node
    return nodes


# ---------------------------------------------------------------------- cost model for the pass ledger
_HEAVY = {"exp": 4, "log": 4, "log1p": 4, "expm1": 4, "tanh": 6, "sigmoid": 8, "softplus": 10, "sin": 4,
          "cos": 4, "pow": 8, "sqrt": 2, "softmax": 8, "log_softmax": 8, "logsumexp": 8,
          "softmax_cross_entropy": 10}
_FREE = {"reshape", "transpose", "expand_dims", "squeeze", "broadcast_to", "broadcast_like", "reshape_like",
         "getitem", "split", "stop_gradient", "size", "zeros_like"}


def node_flops(node, shapes) -> int:
    """A rough count of floating-point operations for one node (matmul exact, transcendental weighted)."""
    if node.op in LEAVES or node.op in _FREE:
        return 0
    out = math.prod(shapes[node.id])
    if node.op == "matmul":
        a = shapes[node.inputs[0]]
        return 2 * out * (a[-1] if a else 1)
    if node.op in ("sum", "mean", "max", "min"):
        return math.prod(shapes[node.inputs[0]])
    return out * _HEAVY.get(node.op, 1)


def nominal_shapes(graph, order) -> dict:
    """Shapes with every unknown size taken as 1 (per sample), for costs reported before any call."""
    feeds = [tuple(1 if d is None else d for d in graph.nodes[i].shape) for i in graph.inputs]
    return concrete_shapes(graph, order, feeds)


def costs(graph, shapes=None) -> dict:
    """FLOPs and peak intermediate bytes (with and without memory planning) of ``graph``."""
    order = list(graph.nodes)
    shapes = shapes or nominal_shapes(graph, order)
    from ..graph import Graph
    concrete = Graph(specialize(graph, order, shapes), graph.outputs, graph.updates, graph.inputs)
    concrete, order = skip_identities(concrete, order)      # what a plan runs, as the executor builds it
    memory = plan_memory(concrete, order, shapes)
    return {"flops": sum(node_flops(graph.nodes[i], shapes) for i in order),
            "peak_bytes": memory.peak_planned, "peak_bytes_unplanned": memory.peak_unplanned}
