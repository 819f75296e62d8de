"""Loops: one loop where two were made, no work for values nobody reads, and loop-invariant code motion."""
from __future__ import annotations

import operator

from ..graph import Graph, Node
from ..ops.registry import COMMUTATIVE, REGISTRY
from ..tensor import VARIABLES
from . import cse, loop_motion, loop_streaming
from .stats import PassStats


def run(graph):
    """Rewrite every scan so each step does only what must be done step by step. Outputs are unchanged.

    - merge: the forward loop that ``sg.grad`` extended with the values its backward pass reads replaces
      the loop it extends (one loop, not two), also once passes rewrote inside their bodies.
    - dead values: a stacked output nobody reads is not computed; a carry nobody reads, and that nothing
      read depends on, is dropped with its work; inputs the body no longer reads are no longer fed.
    - hoisting: body work that depends on no carry leaves the loop. On values every step shares it runs
      once before the loop; on the step's slices it runs once over all steps (an RNN's ``x_t @ W`` for every
      t is one matmul), through each op's ``batch`` rule; work combining xs whose lengths may differ first
      checks them (``same_length``), so it fails as the scan would.
    - sinking: a carry that only sums a term per step (the gradient of a weight, in a reverse loop)
      becomes one op over the stacked terms after the loop (the T small products of a weight gradient
      one matrix product).
    - streaming (checkpointed scans only): a loss summed over every step's output, and a slice of a reverse
      loop computed elementwise from a stacked value, are computed step by step in the loops, so that the
      stacked value is read only row by row and kept as checkpoints (passes/loop_streaming.py).
    """
    counts = {"merged": 0, "dropped": 0, "hoisted": 0, "sunk": 0, "streamed": 0}
    graph, counts["merged"] = merge(graph)
    graph, n = merge_recorded(graph)
    counts["merged"] += n
    for i in [i for i, n in graph.nodes.items() if n.op == "scan"]:
        for step, key in ((loop_motion.drop_dead, "dropped"), (loop_motion.hoist, "hoisted"),
                          (loop_motion.sink, "sunk"), (loop_streaming.reduce, "streamed"),
                          (loop_streaming.feed, "streamed"), (loop_motion.drop_dead, "dropped")):
            if i in graph.nodes:
                graph, n = step(graph, i)
                counts[key] += n
    graph = graph.without_dead()
    return graph, PassStats("loops", changed=sum(counts.values()), details={k: n for k, n in counts.items() if n})


# ------------------------------------------------------------------ merging a loop with its extension
def merge(graph):
    """Scans of one traced body (extended by sg.grad with saved values) over the same inputs become one,
    whose body computes the union of their outputs. Returns (graph, loops removed).

    Bodies that passes rewrote inside (into_bodies: ``h * 1.0`` is ``h``) still merge while they take
    their traced body's inputs: a rewrite keeps a body's values, so twins fed alike keep the same carries.
    """
    groups = {}
    for i, node in graph.nodes.items():
        if node.op == "scan" and _takes_base_inputs(node.attrs["body"]):
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


def _takes_base_inputs(body):
    """Whether ``body`` is as traced, or rewritten only inside: the loop passes (hoisting, dropping dead
    values, sinking) change what a body takes, and a twin so changed computes other values."""
    if body.traced:
        return True
    base = body.base
    return body.graph.inputs == ([p.id for p in base.params] if base.traced else base.graph.inputs)


def merge_recorded(graph):
    """A loop that records a tape for its gradient (a while_loop's) stands for the same loop without one
    over the same inputs: its final states are the same values. Returns (graph, loops removed)."""
    groups = {}
    for i, node in graph.nodes.items():
        if "record" in node.attrs and _takes_base_inputs(node.attrs["body"]):
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
    first_of, index_of, heads = {}, {}, {}
    for head, members in plans.items():
        bodies = [graph.nodes[m].attrs["body"] for m in members]
        C = graph.nodes[head].attrs["n_carry"]
        union, ids = (_traced_union if all(b.traced for b in bodies) else _graph_union)(bodies)
        outputs = list(ids[0][:C])              # (the carries: the first body's)
        for outs in ids:
            for t in outs[C:]:
                if t not in outputs[C:]:        # (a stacked value: one stack however many loops want it)
                    outputs.append(t)
        position = {t: k for k, t in enumerate(outputs) if k >= C}
        union = union(outputs)
        for m, outs in zip(members, ids):
            first_of[m] = head
            for k, t in enumerate(outs):
                index_of[(m, k)] = k if k < C else position[t]
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


def _traced_union(bodies):
    """(a function making the Body of traced twins ``bodies`` that computes the values of given ids, the
    ids of each one's outputs)."""
    from ..loops.body import Body
    base, tensors = bodies[0], {t.id: t for body in bodies for t in body.outputs}

    def union(outputs):
        return Body(base.params, [tensors[i] for i in outputs], base.n_args, base.name, hoisted=base.hoisted,
                    base=base.base)
    return union, [[t.id for t in body.outputs] for body in bodies]


def _graph_union(bodies):
    """The same for twins some pass rewrote: one graph of the first one's nodes and those of the others
    it lacks (a node computing what one of it computes is that one, as CSE finds)."""
    first = bodies[0].graph
    nodes, seen = dict(first.nodes), {}
    for j, n in first.nodes.items():
        seen.setdefault(_node_key(n, n.inputs), j)
    ids = [list(first.outputs)]
    for body in bodies[1:]:
        mapping = {}
        for j, n in body.graph.nodes.items():
            inputs = [mapping[x] for x in n.inputs]
            key = _node_key(n, inputs)
            if key not in seen:
                n = n.copy(inputs=inputs)
                if j in nodes:      # (an id the first body gives another node: the passes chose apart)
                    n = Node(n.op, n.inputs, n.attrs, n.shape, n.dtype, name=n.name, role=n.role, value=n.value,
                             source=n.source, scope=n.scope, adjoint_of=n.adjoint_of, rule=n.rule,
                             requires_grad=n.requires_grad, tensor=n.tensor, meta=n.meta)
                nodes[n.id] = n
                seen[key] = n.id
            mapping[j] = seen[key]
        ids.append([mapping[o] for o in body.graph.outputs])

    def union(outputs):
        return bodies[0].with_graph(Graph(nodes, outputs, (), first.inputs).without_dead())
    return union, ids


def _node_key(node, inputs):
    if node.op in VARIABLES:
        return ("leaf", node.id)        # (twins take the same placeholders)
    if node.op == "constant":
        return cse.constant_key(node)
    if REGISTRY[node.op].has(COMMUTATIVE):
        inputs = sorted(inputs)
    return (node.op, *inputs, cse.attrs_key(node.attrs))


_OP = operator.attrgetter("op")


def into_bodies(graph, fn):
    """Run the pass ``fn`` inside every loop body of ``graph`` (and the bodies within them). Returns
    (graph, how many nodes it changed in them)."""
    changed, replaced = 0, {}
    # (asked after every pass of every compile: one set lookup per node, not a registry lookup)
    holders = {name for name, opdef in REGISTRY.items() if opdef.bodies}
    if holders.isdisjoint(map(_OP, graph.nodes.values())):
        return graph, 0         # (nearly every graph: one scan in C)
    for i, node in graph.nodes.items():
        if node.op not in holders:
            continue
        opdef = REGISTRY[node.op]
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
