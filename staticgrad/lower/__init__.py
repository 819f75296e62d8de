"""Lowering: an optimized graph becomes a runnable program for the concrete sizes of one call.

One entry, :func:`build_program`. On its way: the graph at those sizes (``shapes``), many small ops of
one kind batched into single calls and chains of small products into scans (``batching``, ``chains``),
memory planned into a reusable workspace (``memory``; on request, random draws drawn again for the backward
pass where that lowers the peak, ``recompute``), straight-line numpy source generated
(``codegen``). Tiny float64 plans become Python scalar code instead (``scalarize``, ``scalar_math``); with
``backend="numba"``, elementwise regions become compiled loops (``fuse``; ``numba_plan`` chooses: a short
region's own loop, ``region_source``, ``numba_regions``, ``numba_fma``; else one interpreter,
``numba_backend``; ``numba_cache``, ``vector_math``). ``costs`` serves the pass ledger.
"""
from __future__ import annotations

import numpy as np

from ..ops.registry import REGISTRY
from . import batching, codegen, recompute, scalarize
from .codegen import Program
from .interpret import failed_node, generate
from .loop_source import loop_writer
from .loops import body_sources, lower_loops
from .memory import plan_memory
from .numerics import Reporter, quiet
from .shapes import at_sizes, concrete_shapes

__all__ = ["Backend", "Program", "as_backend", "build_program", "failed_node"]


class Backend:
    """How a compiled function's plans run.

    ``name``: "numpy" (generated numpy code) or "numba" (its elementwise regions fused into compiled
    loops; needs numba). ``scalar``: tiny float64 plans run as Python float code. ``memory_planning``:
    results go into a reused workspace, and small repeated ops are batched (off: one fresh array per
    node, as written). ``check_numerics``: every float value is checked as soon as it exists, and the
    first NaN or infinity raises a NumericsError naming its node (plans then run one numpy call per node:
    no batching, scalar code or fused loops, whose values are not one node's). ``recompute_draws``: the
    backward pass draws its random values (dropout's masks) again instead of holding them from the
    forward pass, wherever that lowers a planned peak (memory for time: see ``recompute``).
    """

    NAMES = ("numpy", "numba")

    def __init__(self, name="numpy", scalar=True, memory_planning=True, check_numerics=False,
                 recompute_draws=False):
        if name not in self.NAMES:
            raise ValueError(f"unknown backend {name!r}: expected 'numpy' or 'numba'")
        if name == "numba":
            from .numba_backend import require
            require()
        self.name, self.scalar, self.memory_planning = name, bool(scalar), bool(memory_planning)
        self.check_numerics, self.recompute_draws = bool(check_numerics), bool(recompute_draws)

    def replace(self, **changes) -> Backend:
        """A backend like this one with ``changes`` (name, scalar, memory_planning, check_numerics,
        recompute_draws)."""
        settings = {"name": self.name, "scalar": self.scalar, "memory_planning": self.memory_planning,
                    "check_numerics": self.check_numerics, "recompute_draws": self.recompute_draws}
        return Backend(**{**settings, **changes})

    def __repr__(self):
        checks = ", check_numerics=True" if self.check_numerics else ""
        checks += ", recompute_draws=True" if self.recompute_draws else ""
        return f"Backend({self.name!r}, scalar={self.scalar}, memory_planning={self.memory_planning}{checks})"


def as_backend(backend) -> Backend:
    return backend if isinstance(backend, Backend) else Backend(backend)


def build_program(graph, shapes, backend="numpy", feeds=None, kind=None, loop=None, in_loop=False) -> Program:
    """The program that runs ``graph`` (an optimized IR graph) when its inputs have ``shapes`` (one shape
    per ``graph.inputs``), with ``backend`` (a name or a :class:`Backend`).

    With ``feeds`` (the call's arrays), a tiny plan may run as scalar code, first checked against the
    numpy plan on them. ``kind="scalar"`` makes it scalar code unchecked, for a copy of a program that
    passed that check (each thread running a plan at once needs a copy: the workspace is the program's).
    ``shapes=None`` gives shape-generic source for reading, with no memory plan. ``loop`` (a
    ``loop_source.LoopSpec``): ``graph`` is a scan's body, and the program runs the whole loop; ``in_loop``:
    ``graph`` is a loop's body (run step after step: the numba backend compiles more of its regions).
    The program's ``kind`` says what runs ("numpy", "scalar" or "numba"), ``stats`` what it batched or
    fused, ``seconds`` what lowering for the numba backend took.
    """
    backend = as_backend(backend)
    order = list(graph.nodes)
    params = graph.parameter_ids()
    if shapes is None:
        program = generate(graph, order, params, graph.inputs)
        program.seconds = 0.0
        _show_bodies(program, graph, [(i, {a: build_program(graph.nodes[i].attrs[a].graph, None, backend)
                                            for a in REGISTRY[graph.nodes[i].op].bodies})
                                       for i in order if getattr(REGISTRY.get(graph.nodes[i].op), "bodies", ())])
        return program
    dtypes = [f.dtype for f in feeds] if feeds is not None else None
    sizes = concrete_shapes(graph, order, shapes, dtypes)
    concrete, order = at_sizes(graph, order, sizes)
    again = {}
    if backend.recompute_draws and backend.memory_planning and loop is None:
        concrete, order, sizes, again = recompute.choose(concrete, order, sizes)
    lowered = lower_loops(concrete, order, sizes, lambda body, feed, loop=None: build_program(
        body, feed, backend, loop=loop, in_loop=True))
    program = _lowered(concrete, order, params, sizes, backend, feeds, kind, loop, in_loop)
    _show_bodies(program, concrete, lowered)
    _count_bodies(program, lowered)
    saved = sum(getattr(concrete.nodes[i].meta["kernel"], "bytes_saved", lambda: 0)() for i, _ in lowered)
    if saved:
        program.stats = dict(program.stats, checkpoint_bytes_saved=saved)
    if again:
        program.stats = dict(program.stats, **again)
    return program


def _show_bodies(program, graph, lowered):
    if lowered:
        program.source += "\n\n" + body_sources(lowered, graph)


def _count_bodies(program, lowered):
    """Add what the loops' bodies keep from call to call (their workspaces, stacked buffers) to the plan's
    own ``memory.workspace_bytes``, and what lowering them took (the numba backend's compiling) and the
    regions they fused to the plan's ``seconds`` and ``stats``."""
    memory = getattr(program, "memory", None)
    bodies = [body for _, programs in lowered for body in programs.values()]
    program.seconds += sum(getattr(body, "seconds", 0.0) for body in bodies)
    fused = sum(getattr(body, "stats", {}).get("fused_regions", 0) for body in bodies)
    if fused:
        program.stats = dict(program.stats, fused_regions=program.stats.get("fused_regions", 0) + fused)
    if memory is None:
        return
    for body in bodies:
        held = getattr(getattr(body, "memory", None), "workspace_bytes", 0)
        memory.workspace_bytes += held


def _lowered(concrete, order, params, sizes, backend, feeds, kind, loop=None, in_loop=False):
    if backend.check_numerics:
        memory = plan_memory(concrete, order, sizes, enable=backend.memory_planning)
        # (source, whatever the size: a check per node is one more line per node, not for a huge graph)
        program = codegen.generate(concrete, order, params, concrete.inputs, memory,
                                   numerics=Reporter(concrete.nodes, sizes))
        program.shapes, program.seconds, program.run = sizes, 0.0, quiet(program.run)
        return program
    program = _numpy_program(concrete, order, params, sizes, backend.memory_planning, loop)
    program.seconds = 0.0
    if loop is None and (kind == "scalar" or (backend.scalar and feeds is not None and
                                              scalarize.eligible(concrete, order, sizes))):
        program = _maybe_scalar(concrete, order, params, sizes, program, None if kind == "scalar" else feeds)
    if backend.name == "numba" and program.kind == "numpy":
        # (a plan that runs as scalar code never needs a compiled loop, nor its compile; a loop's body
        # keeps its loop in its source, around the compiled regions)
        from .numba_plan import fused_program
        writer = loop_writer(loop) if loop is not None else None
        fused, seconds = fused_program(concrete, order, params, concrete.inputs, sizes, writer, in_loop)
        if fused is not None:               # else no region gains from a kernel: the numpy plan runs
            fused.shapes, program = sizes, fused
        program.seconds = seconds
    return program


def _numpy_program(concrete, order, params, shapes, memory_planning, loop=None):
    if loop is not None:
        loop.keep_stacked = loop.keep_stacked and memory_planning      # (off: fresh arrays, as written)
    writer = loop_writer(loop) if loop is not None else None
    # (``shapes`` itself, not a copy of a million entries: batching only adds the sizes of the nodes it makes,
    # under ids of their own)
    batched = batching.batch(concrete, order, shapes) if memory_planning else None
    if batched is not None:
        memory = plan_memory(batched.graph, batched.order, batched.shapes, True, batched.fixed_out, batched.nbytes)
        program = generate(batched.graph, batched.order, params, concrete.inputs, memory, writer=writer)
        counts = {"batched_groups": len(batched.groups), "running_sums": len(batched.folds),
                  "scans": len(batched.scans)}
        program.stats = {k: n for k, n in counts.items() if n}
    else:
        memory = plan_memory(concrete, order, shapes, enable=memory_planning)
        program = generate(concrete, order, params, concrete.inputs, memory, writer=writer)
    program.shapes = shapes
    return program


def _maybe_scalar(graph, order, params, shapes, program, feeds):
    """The scalar version of ``program`` (the caller checked it is eligible), if it agrees on ``feeds``
    (None: a copy of one that did)."""
    try:
        source, used = scalarize.generate(graph, order, params, graph.inputs, shapes)
    except Exception:       # anything the scalar generator cannot express stays with numpy
        return program
    candidate = scalarize.ScalarProgram(source, used, [graph.nodes[i].tensor for i in params], program)
    candidate.seconds = 0.0
    if feeds is None:
        return candidate
    try:
        want, got = program.run(*feeds), candidate.run(*feeds)
    except Exception:
        return program
    for a, b in zip(want[0] + want[1], got[0] + got[1]):
        if not np.allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-9, atol=1e-12,
                           equal_nan=True):
            return program
    return candidate
