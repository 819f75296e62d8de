"""check_numerics: the lines a plan runs after each value to find the first NaN or infinity, and the error
that names the node which made it."""
from __future__ import annotations

import numpy as np

from ..tensor import NumericsError, format_shape, origin


def checked(dtype) -> bool:
    """Whether values of ``dtype`` can be NaN or infinite (integers and booleans cannot)."""
    return np.dtype(dtype).kind in "fc"


def all_finite(value) -> bool:
    return bool(np.isfinite(value).all())


class Reporter:
    """Called by a plan with the id of the node whose value is not finite; raises the NumericsError."""

    def __init__(self, nodes, shapes):
        self.nodes, self.shapes = nodes, shapes

    def __call__(self, i, value):
        raise NumericsError(describe(self.nodes, self.shapes, i, value))


def quiet(run):
    """``run`` without numpy's floating-point warnings: the checks report the node itself."""
    def checked_run(*feeds):
        with np.errstate(all="ignore"):
            return run(*feeds)
    return checked_run


def describe(nodes, shapes, i, value) -> str:
    node = nodes[i]
    value = np.asarray(value)
    bad = ~np.isfinite(value)
    first = tuple(int(k) for k in np.unravel_index(int(np.argmax(bad)), value.shape))
    what = "NaN" if np.isnan(value[first]) else "infinity"
    if node.op in ("placeholder", "parameter"):
        given = "was fed" if node.op == "placeholder" else "holds"
        return (f"{node.op} {node.label()!r} (created at {node.source}) {given} a {what} at index {first} of its "
                f"{format_shape(value.shape)} value")
    ins = ", ".join(format_shape(shapes.get(j, nodes[j].shape)) for j in node.inputs)
    return (f"{node.op} node {i} made the first {what} ({origin(node, nodes.get(node.adjoint_of))}): inputs of "
            f"shapes {ins}, output {format_shape(value.shape)}, {int(bad.sum())} of {value.size} elements not "
            f"finite, the first at index {first}")
