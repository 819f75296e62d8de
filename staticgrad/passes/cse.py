"""Common subexpression elimination."""
import numpy as np

from ..ops.registry import COMMUTATIVE, REGISTRY
from ..tensor import VARIABLES
from .stats import PassStats


def _exact(v):
    """A hashable key equal only for attribute values that act the same: ``True == 1`` and
    ``0.0 == -0.0`` in Python, but ``x[True]`` is a mask and ``x[1]`` a row."""
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, np.generic):
        return ("numpy", v.dtype.str, v.tobytes())
    if isinstance(v, float):
        return ("float", v.hex())
    if isinstance(v, (tuple, list)):
        return (type(v).__name__, tuple(_exact(x) for x in v))
    if isinstance(v, slice):
        return ("slice", _exact(v.start), _exact(v.stop), _exact(v.step))
    if isinstance(v, np.dtype):
        return ("dtype", v.str)
    return (type(v).__name__, v)


def attrs_key(attrs):
    """A hashable, exact key for op attributes (tuples, slices, dtypes and small index arrays)."""
    return tuple((k, _exact(attrs[k])) for k in sorted(attrs))


def constant_key(node):
    v = node.value
    return ("constant", v.dtype.str, v.shape, v.tobytes())


def run(graph):
    """Merge nodes with the same op, attributes and inputs (inputs in any order for commutative ops),
    and constants with the same dtype, shape and bytes, into one node.

    Forward and backward share work this way (``a*b + a*b`` computes one mul). A merged node is forward
    if any of the nodes it stands for was.
    """
    seen = {}
    merged = 0
    keys = {}          # id(attrs dict) -> key: copies of a node share their attrs dict

    def key_of(attrs):
        if not attrs:
            return ()
        k = keys.get(id(attrs))
        if k is None:
            k = keys[id(attrs)] = (attrs_key(attrs), attrs)     # keep attrs alive so its id stays unique
        return k[0]

    def visit(new, node):
        nonlocal merged
        if node.op in VARIABLES:       # never merged: each is its own value
            return node.id
        if node.op == "constant":
            key = constant_key(node)
        else:
            # One flat tuple (op, *inputs, attrs key): the inputs are ids and the attrs key a tuple, so keys of
            # different arities never meet. (A nested inputs tuple per node weighs 200 MB at a million nodes.)
            inputs = sorted(node.inputs) if REGISTRY[node.op].has(COMMUTATIVE) else node.inputs
            key = (node.op, *inputs, key_of(node.attrs))
        twin = seen.get(key)
        if twin is None:
            seen[key] = node.id
            return node.id
        merged += 1
        if node.role == "forward" and new.nodes[twin].role != "forward":
            new.nodes[twin] = new.nodes[twin].copy(role="forward")
        return twin

    graph = graph.rebuild(visit)
    return graph, PassStats("cse", changed=merged)
