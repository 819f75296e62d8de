"""Seeing inside: DOT pictures, what each pass did, the backward sweep as a table, and pass bisection."""
from .. import passes
from .bisect import bisect
from .diffdot import diff_dot
from .dot import GraphvizNotFound, save_dot, to_dot
from .trace import Trace, trace

__all__ = ["GraphvizNotFound", "Trace", "bisect", "diff_dot", "save_dot", "to_dot", "trace"]

# bisect compiles, so it lives here, above the compiler; its older address stays valid.
passes.bisect = bisect
