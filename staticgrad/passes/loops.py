"""Loops: one loop where two were made, no work for values nobody reads, and loop-invariant code motion."""
from __future__ import annotations

import operator

from ..graph import Graph
from ..ops.registry import HOLDS_BODIES, REGISTRY
from . import loop_motion
from .stats import PassStats


def run(graph):
    """Rewrite every scan so each step does only what must be done step by step. Outputs are unchanged.

    - merge: the forward loop that ``sg.grad`` extended with the values its backward pass reads replaces
      the loop it extends (one loop, not two).
    - dead values: a stacked output nobody reads is not computed; a carry nobody reads, and that nothing
      read depends on, is dropped with its work; inputs the body no longer reads are no longer fed.
    - hoisting: body work that depends on no carry leaves the loop. On values every step shares it runs
      once before the loop; on the step's slices it runs once over all steps (an RNN's ``x_t @ W`` for every
      t is one matmul), through each op's ``batch`` rule.
    - sinking: a carry that only sums a term per step (the gradient of a weight, in a reverse loop)
      becomes one op over the stacked terms after the loop (the T small products of a weight gradient
      one matrix product).
    """
    counts = {"merged": 0, "dropped": 0, "hoisted": 0, "sunk": 0}
    graph, counts["merged"] = merge(graph)
    graph, n = merge_recorded(graph)
    counts["merged"] += n
    for i in [i for i, n in graph.nodes.items() if n.op == "scan"]:
        for step, key in ((loop_motion.drop_dead, "dropped"), (loop_motion.hoist, "hoisted"),
                          (loop_motion.sink, "sunk"), (loop_motion.drop_dead, "dropped")):
            if i in graph.nodes:
                graph, n = step(graph, i)
                counts[key] += n
    graph = graph.without_dead()
    return graph, PassStats("loops", changed=sum(counts.values()), details={k: n for k, n in counts.items() if n})


# ------------------------------------------------------------------ merging a loop with its extension
def merge(graph):
    """Scans of one traced body (extended by sg.grad with saved values) over the same inputs become one,
    whose body computes the union of their outputs. Returns (graph, loops removed)."""
    groups = {}
    for i, node in graph.nodes.items():
        if node.op == "scan" and node.attrs["body"].traced:
            body = node.attrs["body"]
            rest = tuple((k, v) for k, v in sorted(node.attrs.items()) if k != "body")
            groups.setdefault((id(body.base), tuple(node.inputs), rest), []).append(i)
    plans = {}
    for members in groups.values():
        if len(members) > 1:
            plans[members[0]] = members
    if not plans:
        return graph, 0
    return _merged(graph, plans), sum(len(m) - 1 for m in plans.values())


def merge_recorded(graph):
    """A loop that records a tape for its gradient (a while_loop's) stands for the same loop without one
    over the same inputs: its final states are the same values. Returns (graph, loops removed)."""
    groups = {}
    for i, node in graph.nodes.items():
        if "record" in node.attrs and node.attrs["body"].traced:
            rest = tuple((k, v) for k, v in sorted(node.attrs.items()) if k not in ("body", "record"))
            key = (node.op, id(node.attrs["body"].base), tuple(node.inputs), rest)
            groups.setdefault(key, []).append(i)
    mapping = {}
    for members in groups.values():
        recording = [m for m in members if graph.nodes[m].attrs["record"] is not None]
        if len(recording) == 1:
            mapping.update({m: recording[0] for m in members if m != recording[0]})
    if not mapping:
        return graph, 0
    nodes = {}
    for i, node in graph.nodes.items():
        target = mapping.get(i)
        if target is not None:
            # (the recording loop takes the place of the first of its twins: it reads the same inputs)
            nodes.setdefault(target, graph.nodes[target])
            continue
        if i in nodes:
            continue
        if any(x in mapping for x in node.inputs):
            node = node.copy(inputs=[mapping.get(x, x) for x in node.inputs])
        nodes[i] = node
    return Graph(nodes, graph.outputs, graph.updates, graph.inputs), len(mapping)


def _merged(graph, plans):
    from ..loops.body import Body
    first_of, index_of, heads = {}, {}, {}
    for head, members in plans.items():
        bodies = [graph.nodes[m].attrs["body"] for m in members]
        C = graph.nodes[head].attrs["n_carry"]
        outputs, position = list(bodies[0].outputs[:C]), {}       # (the carries: one traced body's)
        for m, body in zip(members, bodies):
            first_of[m] = head
            for k, t in enumerate(body.outputs):
                if k < C:
                    index_of[(m, k)] = k
                    continue
                if t.id not in position:        # (a stacked value: one stack however many loops want it)
                    position[t.id] = len(outputs)
                    outputs.append(t)
                index_of[(m, k)] = position[t.id]
        base = bodies[0]
        union = Body(base.params, outputs, base.n_args, base.name, hoisted=base.hoisted, base=base.base)
        heads[head] = graph.nodes[head].copy(attrs=dict(graph.nodes[head].attrs, body=union))
    nodes, mapping = {}, {}
    for i, node in graph.nodes.items():
        if i in first_of and i != first_of[i]:
            mapping[i] = first_of[i]
            continue
        node = heads.get(i, node)
        if node.op == "loop_output" and node.inputs[0] in first_of:
            m = node.inputs[0]
            node = node.copy(inputs=[first_of[m]], attrs=dict(node.attrs, index=index_of[(m, node.attrs["index"])]))
        elif any(x in mapping for x in node.inputs):
            node = node.copy(inputs=[mapping.get(x, x) for x in node.inputs])
        nodes[i] = node
    return Graph(nodes, [mapping.get(o, o) for o in graph.outputs],
                 [(p, mapping.get(e, e)) for p, e in graph.updates], graph.inputs)


_OP = operator.attrgetter("op")


def into_bodies(graph, fn):
    """Run the pass ``fn`` inside every loop body of ``graph`` (and the bodies within them). Returns
    (graph, how many nodes it changed in them)."""
    changed, replaced = 0, {}
    if HOLDS_BODIES.isdisjoint(map(_OP, graph.nodes.values())):
        return graph, 0         # (nearly every graph: one scan in C)
    for i, node in graph.nodes.items():
        # (asked after every pass of every compile: one set lookup per node, not a registry lookup)
        if node.op not in HOLDS_BODIES:
            continue
        opdef = REGISTRY.get(node.op)
        if opdef is None or not opdef.bodies:
            continue
        attrs = dict(node.attrs)
        for attr in opdef.bodies:
            body = attrs[attr]
            inner, stats = fn(body.graph)
            inner, deeper = into_bodies(inner, fn)
            n = (stats.changed if stats is not None and stats.changed else 0) + deeper
            if n or inner is not body.graph:
                attrs[attr] = body.with_graph(inner)
                changed += n
        if any(attrs[a] is not node.attrs[a] for a in opdef.bodies):
            replaced[i] = node.copy(attrs=attrs)
    if not replaced:
        return graph, 0
    nodes = {i: replaced.get(i, n) for i, n in graph.nodes.items()}
    return Graph(nodes, graph.outputs, graph.updates, graph.inputs), changed
