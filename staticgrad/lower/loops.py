"""Loops in a plan: each loop node's bodies become programs of their own, run by the op's runner.

A body is lowered like any graph (``build_program`` at the sizes of one step: memory planned, batched,
its own generated function), once per plan; the loop node then calls a kernel that runs those programs
(a scan's: once per step). ``fn.source`` shows each body's function after the plan's own.
"""
from __future__ import annotations

from ..ops.registry import REGISTRY
from .memory import storage_bases


def lower_loops(graph, order, shapes, build):
    """Give every loop node of ``graph`` (a plan's, at ``shapes``) its runner, its bodies built by
    ``build(body graph, feed shapes)``. Returns [(node id, {body attribute: program})]."""
    lowered = []
    escaping = _escaping_loops(graph, order)
    for i in order:
        node = graph.nodes[i]
        opdef = REGISTRY.get(node.op)
        if opdef is None or opdef.lowering is None:
            if node.inputs and node.inputs[0] in shapes.multi and len(node.attrs) > 1:
                graph.nodes[i] = node.copy(attrs={"index": node.attrs["index"]})     # (only what it reads)
            continue
        feeds = shapes.bodies[i]
        # (a body fed sizes known only at run time gets a builder: its runner builds it per size then)
        in_shapes = [shapes[j] for j in node.inputs]
        dtypes = _value_dtypes(graph, i)
        loop = getattr(opdef.lowering, "loop_form", lambda *a: None)(node, in_shapes, shapes.multi[i], dtypes)
        if loop is not None:
            loop.keep_stacked = i not in escaping
        programs = {attr: build(node.attrs[attr].graph, feeds[attr], **({"loop": loop} if loop and attr == "body"
                                                                            else {}))
                    if feeds[attr] is not None else LazyProgram(node.attrs[attr].graph, build)
                    for attr in opdef.bodies}
        runner = opdef.lowering.runner(node, programs, in_shapes, shapes.multi[i], dtypes)
        meta = dict(node.meta or {}, kernel=runner)
        graph.nodes[i] = node.copy(attrs={}, meta=meta)
        lowered.append((i, programs))
    _lazy_values(graph, lowered)
    return lowered


def _escaping_loops(graph, order):
    """The loop nodes some value of which outlives the call: an output or an update is one of them, or a
    view of one. (The others' stacked values may live in buffers the plan keeps from call to call: no
    caller ever holds them, and a final carry may be a view of a stacked row.)"""
    base = storage_bases(graph, order)
    ends = [base.get(e, e) for e in list(graph.outputs) + [e for _, e in graph.updates]]
    return {graph.nodes[e].inputs[0] for e in ends if graph.nodes[e].op == "loop_output"}


def _lazy_values(graph, lowered):
    """Tell each loop runner that may keep a stacked value as checkpoints which of its values only
    other loops read, row by row (never an output, an update, or any other op)."""
    runners = {i: graph.nodes[i].meta["kernel"] for i, _ in lowered}
    if not any(hasattr(runner, "can_be_lazy") for runner in runners.values()):
        return          # (no map of every node's readers for a plan without such a loop)
    readers = graph.consumers()
    ends = set(graph.outputs) | {e for _, e in graph.updates}
    for i, runner in runners.items():
        if not hasattr(runner, "can_be_lazy"):
            continue
        rowwise = {}
        for r in readers[i]:
            index = graph.nodes[r].attrs["index"]
            uses = [(u, k) for u in readers[r] for k, x in enumerate(graph.nodes[u].inputs) if x == r]
            ok = runner.can_be_lazy(index) and r not in ends and bool(uses) and all(
                u in runners and hasattr(runners[u], "reads_rows") and runners[u].reads_rows(k) for u, k in uses)
            rowwise[index] = rowwise.get(index, True) and ok
        runner.lazy = {index for index, ok in rowwise.items() if ok}
        for r in readers[i]:
            if graph.nodes[r].attrs["index"] in runner.lazy:
                node = graph.nodes[r]       # (its rows are recomputed from the loop's inputs when read)
                graph.nodes[r] = node.copy(meta=dict(node.meta or {}, holds=tuple(graph.nodes[i].inputs)))


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
