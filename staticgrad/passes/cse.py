"""Common subexpression elimination."""
import numpy as np

from ..ops.registry import COMMUTATIVE, REGISTRY
from .stats import PassStats

UNIQUE = ("placeholder", "parameter")   # leaves that are never merged: each is its own value


def attrs_key(attrs):
    """A hashable, exact key for op attributes (tuples, slices, dtypes and small index arrays)."""
    items = []
    for k in sorted(attrs):
        v = attrs[k]
        if isinstance(v, np.ndarray):
            v = ("array", v.dtype.str, v.shape, v.tobytes())
        elif isinstance(v, tuple):
            v = tuple(("array", x.dtype.str, x.shape, x.tobytes()) if isinstance(x, np.ndarray) else
                      (("slice", x.start, x.stop, x.step) if isinstance(x, slice) else x) for x in v)
        elif isinstance(v, slice):
            v = ("slice", v.start, v.stop, v.step)
        elif isinstance(v, np.dtype):
            v = ("dtype", v.str)
        items.append((k, v))
    return tuple(items)


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
        if node.op in UNIQUE:
            return node.id
        if node.op == "constant":
            key = constant_key(node)
        else:
            inputs = tuple(node.inputs)
            if REGISTRY[node.op].has(COMMUTATIVE):
                inputs = tuple(sorted(inputs))
            key = (node.op, inputs, key_of(node.attrs))
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
