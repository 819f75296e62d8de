"""Constant folding."""
import warnings

import numpy as np

from ..graph import Node
from ..ops.registry import BROADCAST, ELEMENTWISE, REGISTRY, SHAPE_ONLY, SHAPE_REF, is_a
from ..tensor import LEAVES
from .stats import PassStats

MAX_GROWTH = 1 << 20                    # never materialize a constant bigger than this many elements


def _ref_positions(node):
    """The positions of inputs the op reads only for their shape."""
    opdef = REGISTRY[node.op]
    if opdef.has(SHAPE_ONLY):
        return range(len(node.inputs))
    if opdef.has(SHAPE_REF):
        return range(1, len(node.inputs))
    return ()


def _broadcast(node) -> bool:
    # A broadcast of a constant stays a (free) view: simplify lets elementwise ops read the scalar directly.
    return is_a(node, BROADCAST)


def evaluate(node, inputs):
    """The value of ``node`` if every input is a constant or a shape-only input of static shape, else None."""
    refs = set(_ref_positions(node))
    args = []
    for pos, x in enumerate(inputs):
        if x.op == "constant":
            args.append(x.value)
        elif pos in refs and None not in x.shape:
            args.append(np.broadcast_to(np.zeros((), x.dtype), x.shape))   # only its shape is read
        else:
            return None
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        value = np.asarray(REGISTRY[node.op].kernel(*args, **node.attrs))
    biggest = max((np.size(a) for a in args), default=1)
    if value.size > biggest and (_broadcast(node) or value.size > MAX_GROWTH):
        return None
    if value.dtype != node.dtype:
        value = value.astype(node.dtype)
    value = np.array(value, copy=True)      # never keep a view of another constant
    value.setflags(write=False)
    return value


def _fold_through_broadcasts(new, node, inputs):
    """op(broadcast(c1), c2) -> broadcast(op(c1, c2)): compute on the small constants, keep the free view."""
    if not REGISTRY[node.op].has(ELEMENTWISE) or not any(_broadcast(x) for x in inputs):
        return None
    values, refs = [], set()
    for x in inputs:
        if x.op == "constant":
            values.append(x.value)
        elif _broadcast(x) and new.nodes[x.inputs[0]].op == "constant":
            values.append(new.nodes[x.inputs[0]].value)
            refs.update(x.inputs[1:])           # (broadcast_like's reference)
        else:
            return None
    # A reference of unknown size is also a check made when the call runs ((5, 3) against (None, 3) must
    # have 5 rows then): the folded value keeps a broadcast_like of it, never a plain broadcast_to.
    checked = None in node.shape or any(None in new.nodes[r].shape for r in refs)
    if None in node.shape:
        # Only a reference of the node's own static shape stands for its run-time shape: another operand
        # may widen it ((N, 1) against a constant (3,) is (N, 3)), and two references may differ (1 and N).
        if len(refs) != 1:
            return None
        (ref,) = refs
        if tuple(new.nodes[ref].shape) != tuple(node.shape):
            return None
    elif checked:
        if len(refs) != 1:
            return None
        (ref,) = refs
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        value = np.array(REGISTRY[node.op].kernel(*values, **node.attrs), dtype=node.dtype)
    value.setflags(write=False)
    const = Node("constant", (), {}, value.shape, value.dtype, role=node.role, value=value, source=node.source,
                 scope=node.scope)
    new.add(const)
    if checked:
        new.add(node.copy(op="broadcast_like", inputs=[const.id, ref], attrs={}))
    else:
        new.add(node.copy(op="broadcast_to", inputs=[const.id], attrs={"shape": tuple(node.shape)}))
    return node.id


def run(graph):
    """Replace every node whose inputs are all constants by one constant computed now, at compile time.

    Shape-only inputs (the reference of zeros_like, size, broadcast_like...) count as constants when
    their static shape is fully known. Results equal what the node would compute at run time.
    """
    folded = 0
    # what may fold: a constant, or a broadcast of one, among the inputs; or an input read for its shape
    foldable = {"constant"} | {name for name, op in REGISTRY.items() if op.has(BROADCAST)}
    shape_readers = {name for name, op in REGISTRY.items() if op.has(SHAPE_ONLY) or op.has(SHAPE_REF)}

    def visit(new, node):
        nonlocal folded
        if node.op in LEAVES or node.dtype.kind == "O":
            return node.id          # (a loop's values are made by its plan's runner, never folded here)
        nodes = new.nodes
        if node.op not in shape_readers:
            for i in node.inputs:
                if nodes[i].op in foldable:
                    break
            else:
                return node.id      # the common case: nothing constant to fold here
        inputs = [nodes[i] for i in node.inputs]
        value = evaluate(node, inputs)
        if value is not None:
            new.add(node.copy(op="constant", inputs=[], attrs={}, value=value, shape=value.shape,
                              requires_grad=False))
            folded += 1
            return node.id
        replacement = _fold_through_broadcasts(new, node, inputs)
        if replacement is not None:
            folded += 1
            return replacement
        return node.id

    return graph.rebuild(visit), PassStats("constant_fold", changed=folded)
