"""``backend="numba"``: each elementwise region of a plan becomes one compiled loop.

numba is optional (``pip install staticgrad[numba]``). Kernels are compiled once per distinct region
source and kept for the life of the process; their compile time is added to ``fn.report()``.
"""
from __future__ import annotations

import time

from . import fuse, scalar_math
from .codegen import generate

_KERNELS = {}          # source -> compiled kernel, shared by every function in this process


class NumbaUnavailable(ImportError):
    """backend="numba" was asked for, but numba is not installed."""


def require():
    try:
        import numba  # noqa: F401
    except ImportError:
        raise NumbaUnavailable("backend='numba' needs numba: pip install 'staticgrad[numba]' (or numba)") from None


def _compile_kernel(source):
    kernel = _KERNELS.get(source)
    if kernel is None:
        import numba
        namespace = dict(fuse.HELPERS)
        # numpy's division-by-zero semantics (inf/nan), not Python's exception.
        for name, fn in scalar_math.FUNCTIONS.items():
            namespace[name] = numba.njit(fn, cache=False, error_model="numpy")
        exec(compile(source, "<staticgrad fused kernel>", "exec"), namespace)
        kernel = numba.njit(namespace["kernel"], error_model="numpy")
        _KERNELS[source] = kernel
    return kernel


def fused_program(graph, order, params, inputs, shapes, memory, feeds=None):
    """The plan's program with every elementwise region computed by one numba loop.

    Returns (program, seconds spent compiling). Kernels compile on their first call, so when ``feeds``
    are given the program is run once here to pay that cost up front (and measure it).
    """
    regions, order = fuse.find_regions(graph, order, shapes)
    start = time.perf_counter()
    fused = [(_compile_kernel(fuse.kernel_source(graph, r, shapes)), r) for r in regions if r.outputs]
    # Nodes moved behind a region may now sit where the memory plan expected others: no workspace here.
    program = generate(graph, order, params, inputs, None, fused=fused)
    if feeds is not None:
        program.run(*feeds)
    program.regions = len(fused)
    return program, time.perf_counter() - start
