"""Loops in a plan: each loop node's bodies become programs of their own, run by the op's runner.

A body is lowered like any graph (``build_program`` at the sizes of one step: memory planned, batched,
its own generated function), once per plan; the loop node then calls a kernel that runs those programs
(a scan's: once per step). ``fn.source`` shows each body's function after the plan's own.
"""
from __future__ import annotations

from ..ops.registry import REGISTRY


def lower_loops(graph, order, shapes, build):
    """Give every loop node of ``graph`` (a plan's, at ``shapes``) its runner, its bodies built by
    ``build(body graph, feed shapes)``. Returns [(node id, {body attribute: program})]."""
    lowered = []
    for i in order:
        node = graph.nodes[i]
        opdef = REGISTRY.get(node.op)
        if opdef is None or opdef.lowering is None:
            if node.inputs and node.inputs[0] in shapes.multi and len(node.attrs) > 1:
                graph.nodes[i] = node.copy(attrs={"index": node.attrs["index"]})     # (only what it reads)
            continue
        feeds = shapes.bodies[i]
        # (a body fed sizes known only at run time gets a builder: its runner builds it per size then)
        programs = {attr: build(node.attrs[attr].graph, feeds[attr]) if feeds[attr] is not None
                    else LazyProgram(node.attrs[attr].graph, build) for attr in opdef.bodies}
        in_shapes = [shapes[j] for j in node.inputs]
        dtypes = _value_dtypes(graph, i)
        runner = opdef.lowering.runner(node, programs, in_shapes, shapes.multi[i], dtypes)
        meta = dict(node.meta or {}, kernel=runner)
        graph.nodes[i] = node.copy(attrs={}, meta=meta)
        lowered.append((i, programs))
    return lowered


class LazyProgram:
    """A body whose sizes only a call can tell: built at the first call of each size, then reused."""

    source = "# (built when the loop runs, for the sizes it is fed)"

    def __init__(self, graph, build):
        self.graph, self.build, self.built = graph, build, {}

    def run_for(self, shapes):
        program = self.built.get(shapes)
        if program is None:
            program = self.built[shapes] = self.build(self.graph, list(shapes))
        return program.run


def _value_dtypes(graph, i):
    """The dtypes of a loop node's values, from the bodies' outputs (via its op's lowering)."""
    node = graph.nodes[i]
    return REGISTRY[node.op].lowering.dtypes(node)


def body_sources(lowered, graph) -> str:
    """The source of each lowered body's program, named after its loop node, to show after the plan's."""
    parts = []
    for i, programs in lowered:
        node = graph.nodes[i]
        for attr, program in programs.items():
            head = f"# {attr} of {node.op} node {i} (built at {node.source}): run by {node.meta['kernel'].name}_"
            parts.append(head + "\n" + program.source.replace("def run(", f"def {attr}_{i}(", 1))
    return "\n\n".join(parts)
