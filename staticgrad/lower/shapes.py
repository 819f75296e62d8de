"""A graph at the concrete sizes of one call: every node's shape, and the nodes rewritten for them.

Ops that read an input only for its shape (broadcast_like, sum_like, size, ...) become what those
shapes make of them (a broadcast_to, a plain sum, a constant, or nothing at all), through each op's
``specialize`` hook; then identities are skipped, so a plan runs only what the sizes require.
"""
from __future__ import annotations

import math

import numpy as np

from ..graph import Graph
from ..ops.registry import ELEMENTWISE, IDENTITY, REGISTRY, SHAPE_ONLY, is_a
from ..tensor import LEAVES, VARIABLES, FeedError, ShapeError, format_shape

FOLD_LIMIT = 64         # elements: constants made from run-time sizes (1/N of a mean's gradient) fold


class _Spec:
    """What a shape rule reads of an input: shape, dtype, ndim."""

    __slots__ = ("shape", "dtype", "ndim")

    def __init__(self, shape, dtype):
        self.shape, self.dtype, self.ndim = tuple(shape), dtype, len(shape)


class Sizes(dict):
    """{node id: shape} at the sizes of one call; ``multi`` holds, for each node of several values (a
    loop's), the shapes of those values, and ``bodies`` the sizes inside its bodies."""

    def __init__(self, *args):
        super().__init__(*args)
        self.multi, self.bodies = {}, {}


def concrete_shapes(graph, order, feed_shapes, feed_dtypes=None) -> Sizes:
    """Every node's shape for these placeholder shapes (the static rules run again on exact sizes)."""
    nodes = graph.nodes
    shapes = Sizes({i: s.shape for i, s in _fed_specs(graph, feed_shapes, feed_dtypes).items()})
    for i in order:
        node = nodes[i]
        if i in shapes:
            continue
        opdef = REGISTRY.get(node.op)
        if opdef is not None and opdef.lowering is not None:
            shapes[i] = ()
            shapes.multi[i], shapes.bodies[i] = _loop_shapes(node, opdef, shapes)
            continue
        if node.inputs and nodes[node.inputs[0]].id in shapes.multi:
            shapes[i] = tuple(shapes.multi[node.inputs[0]][node.attrs["index"]])
            continue
        if node.op in LEAVES or (None not in node.shape and _known(node.inputs, nodes)):
            shapes[i] = tuple(node.shape)     # static shapes without unknowns are exact
            continue
        # Also where the result's shape is static: inputs sized by different feeds must still agree (the
        # logits and labels of a loss fed 3 rows and 4 labels).
        try:
            shape, _ = REGISTRY[node.op].infer([_Spec(shapes[j], nodes[j].dtype) for j in node.inputs], **node.attrs)
        except ShapeError as err:
            sizes = ", ".join(format_shape(shapes[j]) for j in node.inputs)
            fed = ", ".join(f"{graph.nodes[j].label()!r} {format_shape(s)}" for j, s in zip(graph.inputs, feed_shapes)
                            if None in graph.nodes[j].shape)
            name = REGISTRY[node.op].checks or node.op
            raise ShapeError(f"{name} (built at {node.source}): {err}; the sizes fed ({fed}) give inputs of "
                             f"shapes {sizes}") from None
        shapes[i] = tuple(shape)
    return shapes


def _known(inputs, nodes) -> bool:
    """Whether every one of ``inputs`` has a static shape without unknown sizes (a loop, not all() over a
    generator: asked of every node of a plan)."""
    for j in inputs:
        if None in nodes[j].shape:
            return False
    return True


def _loop_shapes(node, opdef, shapes):
    """(the shapes of a loop node's values, {body attribute: the sizes fed to that body}) at these sizes."""
    in_shapes = [shapes[j] for j in node.inputs]
    feeds = opdef.lowering.feeds(node, in_shapes)
    outs = {}
    for attr in opdef.bodies:
        if feeds[attr] is None:         # (sizes known only when it runs: its runner builds it then)
            outs[attr] = None
            continue
        body = node.attrs[attr].graph
        inner = concrete_shapes(body, list(body.nodes), feeds[attr])
        outs[attr] = [inner[o] for o in body.outputs]
    return opdef.lowering.out_shapes(node, in_shapes, outs), feeds


def _fed_specs(graph, feed_shapes, feed_dtypes):
    specs = {}
    for node_id, shape, given in zip(graph.inputs, feed_shapes, feed_dtypes or [None] * len(feed_shapes)):
        node = graph.nodes[node_id]
        if len(shape) != len(node.shape) or any(d is not None and d != s for d, s in zip(node.shape, shape)):
            given = f" (dtype {given})" if given is not None else ""
            raise FeedError(f"placeholder {node.label()!r}: expected shape {format_shape(node.shape)} (dtype "
                            f"{node.dtype}), got shape {format_shape(shape)}{given}")
        specs[node_id] = _Spec(shape, node.dtype)
    return specs


def nominal_shapes(graph, order) -> dict:
    """Shapes with every unknown size taken as 1 (per sample), for costs reported before any call."""
    feeds = [tuple(1 if d is None else d for d in graph.nodes[i].shape) for i in graph.inputs]
    return concrete_shapes(graph, order, feeds)


def specialize(graph, order, shapes):
    """The nodes of ``order``, each rewritten by its op's ``specialize`` hook for these sizes; ops that read
    only shapes become constants, and so do small elementwise ops of constants.

    Dropping reads of inputs kept only for their shapes ends those values' lifetimes earlier (less memory
    held). Returns {node id: node} for the whole order (unchanged nodes are shared, not copied).
    """
    nodes = {}
    for i in order:
        node = graph.nodes[i]
        if node.op not in LEAVES:
            node = _specialized(node, shapes, nodes)
        nodes[i] = node
    return nodes


def _specialized(node, shapes, nodes):
    opdef = REGISTRY[node.op]
    if opdef.flags & SHAPE_ONLY:
        dummy = np.broadcast_to(np.zeros((), np.int8), shapes[node.inputs[0]])
        return _constant(node, opdef.kernel(dummy, **node.attrs))
    if opdef.specialize is not None:
        return opdef.specialize(node, shapes, nodes)
    if (node.inputs and opdef.flags & ELEMENTWISE and _all_constant(node.inputs, nodes)
            and math.prod(shapes[node.id]) <= FOLD_LIMIT):
        with np.errstate(all="ignore"):
            return _constant(node, opdef.kernel(*(nodes[j].value for j in node.inputs), **node.attrs))
    return node


def _all_constant(inputs, nodes) -> bool:
    for j in inputs:
        if nodes[j].op != "constant":
            return False
    return True


def _constant(node, value):
    value = np.asarray(value, dtype=node.dtype)
    value.setflags(write=False)
    return node.copy(op="constant", inputs=[], attrs={}, value=value, shape=value.shape)


def skip_identities(graph, order):
    """``graph`` and ``order`` without the nodes a plan need not run.

    Identity nodes (at these sizes, e.g., a gradient that needs no reduction back to its input's shape)
    are skipped: their readers read the source instead, so no call is made for them and the chains through
    them stay visible to batching and scans. One that is returned, or an update, stays. Nodes nothing
    reads any more are dropped too: :func:`specialize` gives readers of a shape the concrete one, so a
    value kept only for its shape (the ``x @ W`` whose gradient is broadcast back to its shape) is not
    computed. Placeholders and parameters stay: the call still takes them.
    """
    nodes = graph.nodes
    keep = set(graph.outputs) | {i for pair in graph.updates for i in pair}
    alias, kept = {}, {}
    for i in order:
        node = nodes[i]
        if alias and any(j in alias for j in node.inputs):
            node = node.copy(inputs=[alias.get(j, j) for j in node.inputs])
        if is_a(node, IDENTITY) and i not in keep:
            alias[i] = node.inputs[0]
            continue
        kept[i] = node
    read = set(keep)
    for i in reversed(order):
        if i in kept and i in read:
            read.update(kept[i].inputs)
    dead = [i for i in kept if i not in read and kept[i].op not in VARIABLES]
    if not alias and not dead:
        return graph, order
    for i in dead:
        del kept[i]
    return Graph(kept, graph.outputs, graph.updates, graph.inputs), [i for i in order if i in kept]


def at_sizes(graph, order, shapes):
    """The graph and schedule a plan runs at these sizes: specialized, identities skipped."""
    concrete = Graph(specialize(graph, order, shapes), graph.outputs, graph.updates, graph.inputs)
    return skip_identities(concrete, order)
