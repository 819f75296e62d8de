"""A region's own compiled loop (``region_source``), called with the region's arrays and its outputs' buffers.

In a loop's body each step's region is small (an RNN's is a few thousand numbers): the interpreter's
packing and dispatch cost more than the work. A function compiled for the region alone takes its arrays
as they are and costs a numba dispatch (well under a microsecond) plus its loop. Each distinct source is
compiled once per process, and its machine code kept on disk (``numba_cache``), like the interpreter's;
compile time grows with a region's length, so long regions are left to the interpreter
(``numba_plan.weight``).
"""
from __future__ import annotations

import time

import numpy as np

from . import numba_cache, region_source
from .numba_backend import helpers

_compiled = {}          # source -> numba dispatcher, for this process


class RegionKernel:
    """One region's compiled function and how the plan calls it.

    ``passing[k]``: how input k is passed: "array" (as it is), "float" (``float(x)``, a value of one
    number and no axes), "item" (``float(x.item())``, one number with axes) or "literal" (a constant's
    number, bound once). ``buffers``: {output id: an array of its own} for outputs that may not take
    their workspace slot (it holds an input the loop still reads through a view). ``over``: {output id:
    the position of the input it is written over} (no argument of its own). ``seconds``: compile time.
    """

    writes_outputs = True

    def __init__(self, graph, region, shapes, buffers=None, over=None):
        self.region = region
        nodes = graph.nodes
        self.over = dict(over or {})
        self.source = region_source.source(graph, region, shapes, self.over)
        self.passing = [_passing(nodes[j], shapes[j], region.shape) for j in region.inputs]
        self.outputs = {o: (tuple(region.shape), nodes[o].dtype) for o in region.outputs}
        self.buffers = dict(buffers or {})
        self.run, self.seconds = compiled(self.source, self._signature(graph, shapes))

    def _signature(self, graph, shapes):
        """The argument types of the likely call: C-ordered writable arrays, floats, a constant's own type."""
        import numba
        types = []
        for j, how in zip(self.region.inputs, self.passing):
            node = graph.nodes[j]
            if how != "array":
                types.append(numba.float64)
            elif node.op == "constant":
                types.append(numba.typeof(np.asarray(node.value)))
            else:
                types.append(numba.types.Array(numba.from_dtype(node.dtype), len(shapes[j]), "C"))
        for o, (shape, dtype) in self.outputs.items():
            if o in self.over:
                continue
            types.append(numba.types.Array(numba.from_dtype(dtype), len(shape), "C"))
        return tuple(types)

    def literal(self, node) -> float:
        return float(np.asarray(node.value).reshape(()))


def _passing(node, shape, region_shape):
    if not region_source.is_scalar(shape, region_shape):
        return "array"
    value = node.value if node.op == "constant" else None
    if isinstance(value, np.ndarray) and value.base is None and not value.flags.writeable or \
            isinstance(value, (float, int, bool, np.generic)):
        return "literal"        # (a constant no call can change; batching's rows are writable views)
    return "float" if not shape else "item"


def compiled(source, signature):
    """(the dispatcher for ``source``, compiled for ``signature``; seconds that took): loaded from disk
    when a process compiled it before."""
    start = time.perf_counter()
    run = _compiled.get(source)
    if run is None:
        run = numba_cache.load(source, helpers, function=region_source.NAME, kind="region")
        if run is None:
            import numba

            namespace = dict(helpers())
            exec(compile(source, "<staticgrad region>", "exec"), namespace)
            run = numba.njit(namespace[region_source.NAME], error_model="numpy", no_cfunc_wrapper=True)
        _compiled[source] = run
    if signature not in run.signatures:
        run.compile(signature)
    return run, time.perf_counter() - start
