"""``backend="numba"``: which elementwise regions of a plan run compiled, and how, and the program for them.

A region becomes one call of its own compiled loop (``numba_regions``: the arrays passed as they are,
results written into their buffers) when compiling it is cheap enough (``weight``) and it gains from it
(``own_loop_gains``): a tanh (numpy's float64 one is libm's scalar call), or two nodes or more (one pass
and one call instead of one per node), and, in a plan that is not a loop's body, repays its compile
(``pays_once``). A longer region is left to the interpreter (``numba_backend``), which compiles nothing
per region, where that gains; the rest of the plan stays numpy calls.
"""
from __future__ import annotations

import math
import time

import numpy as np

from . import fuse, region_source
from .interpret import INTERPRET_ABOVE, generate
from .memory import plan_memory, storage_bases
from .numba_backend import Kernel, interpreter, worth_fusing
from .numba_regions import RegionKernel

MAX_WEIGHT = 64         # a region's own loop is compiled up to this weight (about a second, none cached)
POLYNOMIAL_WEIGHT = 16
FEW = 1024              # numbers: up to this many, one call of a region's own loop beats the interpreter's
LARGE = 65536           # numbers: from this many, a plan's float64 arithmetic is worth a loop of its own


def fused_program(graph, order, params, inputs, shapes, writer=None, in_loop=False):
    """The plan's program with its elementwise regions computed by compiled loops (``in_loop``: the plan
    is a loop's body, run step after step, ``writer`` the class that writes it, if not the default).

    Returns (program, seconds spent: finding the regions, compiling or loading their loops); the program
    is None when no region gains from one. Regions move nodes, so the workspace is planned again over the
    new order (the numpy plan's does not fit).
    """
    start = time.perf_counter()
    own = len(order) <= INTERPRET_ABOVE      # (a huge plan runs as steps: their kernels return arrays)
    regions, order = fuse.find_regions(graph, order, shapes, broadcast=own, smallest=1 if own else 2)
    chosen, interpreted, order = _choose(graph, regions, order, shapes, own, in_loop)
    if not chosen and not interpreted:
        return None, time.perf_counter() - start
    memory, placed = _plan(graph, order, shapes, chosen, interpreted)
    fused = [(RegionKernel(graph, r, shapes, *placed[id(r)]), r) for r in chosen]
    if interpreted:
        templates = {id(r): templates_of(graph, r, shapes) for r in interpreted}
        machine = interpreter(frozenset().union(*templates.values()))
        fused += [(Kernel(fuse.lower(graph, r, shapes, machine.opcode), machine.run), r) for r in interpreted]
    program = generate(graph, order, params, inputs, memory, fused=fused, writer=writer)
    program.kind, program.stats = "numba", {"fused_regions": len(fused)}
    return program, time.perf_counter() - start


def _choose(graph, regions, order, shapes, own, in_loop):
    """(regions for a loop of their own, regions for the interpreter, the order): a region too long for
    a loop of its own, or one the interpreter runs faster, is found again as the interpreter's regions
    (operands of its shape or scalars only), each fused where that gains."""
    chosen, interpreted, reordered = [], [], {}
    for r in regions:
        if not r.outputs:
            continue
        used = templates_of(graph, r, shapes)
        if own and weight(graph, r, shapes) <= MAX_WEIGHT and own_loop_gains(r, used) and (
                in_loop or pays_once(graph, r, shapes, used)):
            chosen.append(r)
            continue
        parts = [r]
        if own and len(r.nodes) >= 2:
            parts, reordered[r.nodes[0]] = fuse.find_regions(graph, r.nodes, shapes)
        for part in parts:
            if len(part.nodes) >= 2 and part.outputs and worth_fusing(part, shapes,
                                                                      templates_of(graph, part, shapes)):
                interpreted.append(part)
    if reordered:           # (each region's nodes are consecutive: its new order takes their places)
        skip, new_order = 0, []
        for i in order:
            if skip:
                skip -= 1
            elif i in reordered:
                new_order += reordered[i]
                skip = len(reordered[i]) - 1
            else:
                new_order.append(i)
        order = new_order
    return chosen, interpreted, order


def templates_of(graph, region, shapes) -> set:
    """The per-element templates of a region's nodes (``fuse.template``)."""
    nodes = graph.nodes
    return {fuse.template(nodes, shapes, nodes[i]) for i in region.nodes}


def weight(graph, region, shapes) -> int:
    """What compiling a region's own loop costs, in nodes: a polynomial weighs as much as 16 arithmetic
    nodes (CPU time cold, after numba's own setup: 0.15 s for 24 nodes of arithmetic, 0.8 s for 4 tanh
    and 8 nodes beside them: each tanh's polynomial is inlined and typed again)."""
    nodes = graph.nodes         # (per node: four tanh weigh four times one)
    polynomials = sum(fuse.template(nodes, shapes, nodes[i]) in region_source.POLYNOMIAL for i in region.nodes)
    return len(region.nodes) + POLYNOMIAL_WEIGHT * polynomials


def own_loop_gains(region, templates) -> bool:
    """Whether a region's own loop beats numpy's calls (and the interpreter): two nodes or more (one pass
    and one call for all), or a tanh (its polynomial against libm's call). sin and cos only over a few
    numbers: in one loop with the other ops their polynomials do not vectorize, the interpreter's
    blocks do (twice as fast from 8,192 numbers on)."""
    if region_source.rereads(templates) and math.prod(region.shape) > FEW:
        return False
    return len(region.nodes) >= 2 or any(t in region_source.POLYNOMIAL for t in templates)


def pays_once(graph, region, shapes, templates) -> bool:
    """Whether a region of a plan that runs once a call (not a loop's body, run step after step) is worth
    a loop of its own, compiled once per process (0.1-0.2 s cold, then loaded from disk): where the interpreter
    would fuse it, or where it saves hundreds of µs a call, two nodes or more of float64 over LARGE numbers
    or more (one pass over memory instead of one per node: 2.4-3.6x numpy's calls over a million numbers).
    Over float32 numpy's calls are as fast (a step of B, the MLP, or of V1, the CNN, gains nothing)."""
    if worth_fusing(region, shapes, templates):
        return True
    return len(region.nodes) >= 2 and math.prod(region.shape) >= LARGE and all(
        graph.nodes[i].dtype == np.float64 for i in region.nodes)


def _plan(graph, order, shapes, chosen, interpreted):
    """The workspace over the new order, and for each region of its own loop ({output: an array of its
    own}, {output: the position of the input it is written over}).

    The planner sees each such region as its outputs alone, each reading all the region's inputs (its
    inner values never leave the loop); an interpreter's nodes take no memory (its kernel returns fresh
    arrays). An output may then take the slot of an input dying with the region, as numpy's in-place
    calls do (a parameter's new value the gradient's buffer, to hand over): the loop writes each element
    after reading the inputs', and reads and writes the same array, which LLVM vectorizes (two arrays
    that overlap make it take its one-at-a-time loop). Not if the input reaches it through a view (its
    elements lie elsewhere), nor in a loop that may run twice (sin, cos): those outputs get an array of
    their own.
    """
    nodes, inner = dict(graph.nodes), set()
    for r in chosen:
        for i in r.nodes:
            if i in r.outputs:
                nodes[i] = nodes[i].copy(inputs=list(r.inputs))
            else:
                inner.add(i)
    fixed = {i: None for r in interpreted for i in r.nodes}
    memory = plan_memory(_Collapsed(graph, nodes), [i for i in order if i not in inner], shapes, True, fixed)
    base = storage_bases(graph, order)
    placed = {}
    for r in chosen:
        own, over = {}, {}
        twice = region_source.rereads(templates_of(graph, r, shapes))
        for o in r.outputs:
            slot = memory.slot.get(o)
            shared = [k for k, j in enumerate(r.inputs) if memory.slot.get(base[j]) == slot] if slot is not None else []
            if shared and (twice or any(base[r.inputs[k]] != r.inputs[k] for k in shared)):
                _own_array(memory, o, slot, own, graph.nodes[o].dtype, r.shape)
            elif shared:
                over[o] = shared[0]
        placed[id(r)] = (own, over)
    return memory, placed


class _Collapsed:
    """A plan's graph as the workspace planner sees it (``nodes`` in place of the graph's)."""

    def __init__(self, graph, nodes):
        self.nodes, self.outputs, self.updates = nodes, graph.outputs, graph.updates


def _own_array(memory, o, slot, own, dtype, shape):
    del memory.slot[o]
    memory.handoff = {k: s for k, s in memory.handoff.items() if s != slot}
    own[o] = np.empty(shape, dtype)
    memory.workspace_bytes += own[o].nbytes
