"""Seeing inside: DOT pictures, what each pass did, the backward sweep as a table, pass bisection, and a
model's summary (layers, shapes, parameters, FLOPs, peak bytes)."""
from .. import passes
from ..function import Function
from ..nn.layers import Module
from ..tensor import Tensor
from .bisect import bisect
from .diffdot import diff_dot
from .dot import GraphvizNotFound, save_dot, to_dot
from .notebook import repr_svg
from .summary import Summary, summary
from .trace import Trace, trace

__all__ = ["GraphvizNotFound", "Summary", "Trace", "bisect", "diff_dot", "save_dot", "summary", "to_dot", "trace"]

# bisect compiles, so it lives here, above the compiler; its older address stays valid.
passes.bisect = bisect


def _trace(self, feeds, **kwargs):
    """Print the backward sweep on ``feeds`` as a table (node, rule, contributions, fork sums); returns a
    staticgrad.Trace (see staticgrad.explain.trace)."""
    return trace(self, feeds, **kwargs)


def _to_dot(self, stage="optimized", **kwargs):
    """This function's graph as a pydot.Dot (see staticgrad.to_dot)."""
    return to_dot(self, stage=stage, **kwargs)


def _summary(self, batch=None, feeds=None, **kwargs):
    """A table of this function's layers, shapes, parameters, FLOPs per call and peak bytes (see
    staticgrad.summary)."""
    return summary(self, batch=batch, feeds=feeds, **kwargs)


def _module_summary(self, input_shape=None, batch=None, dtype="float64"):
    """A table of this module's layers and parameters; with ``input_shape`` (e.g. ``(None, 784)``) also
    their output shapes, FLOPs and the peak bytes of the forward pass (see staticgrad.summary)."""
    return summary(self, batch=batch, input_shape=input_shape, dtype=dtype)


# Seeing inside is a wing above the compiler: it gives compiled functions (and modules) these methods (as
# ops/ gives tensors their operators), so function.py and nn import nothing from here.
Function.trace = _trace
Function.to_dot = _to_dot
Function.summary = _summary
Module.summary = _module_summary
# Jupyter draws a compiled function or a graph tensor shown as a cell's value (see explain.notebook).
Function._repr_svg_ = repr_svg
Tensor._repr_svg_ = repr_svg
