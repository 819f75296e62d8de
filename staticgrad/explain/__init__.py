"""Seeing inside: DOT pictures, what each pass did, the backward sweep as a table, and pass bisection."""
from .. import passes
from ..function import Function
from ..tensor import Tensor
from .bisect import bisect
from .diffdot import diff_dot
from .dot import GraphvizNotFound, save_dot, to_dot
from .notebook import repr_svg
from .trace import Trace, trace

__all__ = ["GraphvizNotFound", "Trace", "bisect", "diff_dot", "save_dot", "to_dot", "trace"]

# bisect compiles, so it lives here, above the compiler; its older address stays valid.
passes.bisect = bisect


def _trace(self, feeds, **kwargs):
    """Print the backward sweep on ``feeds`` as a table (node, rule, contributions, fork sums); returns a
    staticgrad.Trace (see staticgrad.explain.trace)."""
    return trace(self, feeds, **kwargs)


def _to_dot(self, stage="optimized", **kwargs):
    """This function's graph as a pydot.Dot (see staticgrad.to_dot)."""
    return to_dot(self, stage=stage, **kwargs)


# Seeing inside is a wing above the compiler: it gives compiled functions these methods (as ops/ gives
# tensors their operators), so function.py imports nothing from here.
Function.trace = _trace
Function.to_dot = _to_dot
# Jupyter draws a compiled function or a graph tensor shown as a cell's value (see explain.notebook).
Function._repr_svg_ = repr_svg
Tensor._repr_svg_ = repr_svg
