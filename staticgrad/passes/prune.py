"""Dead-branch pruning for inputs that need no gradient."""
from ..graph import Graph
from ..ops.registry import IDENTITY, SHAPE_REF, is_a
from .stats import PassStats


def requires_grad(graph) -> dict:
    """{node id: whether it depends on a parameter or on a placeholder created with requires_grad}."""
    req = {}
    for node in graph.nodes.values():
        if not node.inputs:
            req[node.id] = node.op == "parameter" or (node.op == "placeholder" and node.requires_grad)
        else:
            req[node.id] = any(req[i] for i in node.inputs)
    return req


def run(graph):
    """Drop every adjoint node that serves a branch needing no gradient, and the stop_gradient markers.

    ``sg.grad`` only walks the cone between ``wrt`` and ``y``, so it builds no adjoint for a branch that
    leads only to constants or to placeholders without requires_grad. This pass makes that hold for any
    graph handed to the compiler: a backward node made for a forward node that requires no grad, and
    that no output or update reads, is removed; ``stop_gradient`` (the identity at run time) is bypassed.
    Outputs are unchanged: only identities are bypassed and only unread nodes are dropped.
    """
    before = graph
    bypassed = 0

    def visit(new, node):
        nonlocal bypassed
        # (an identity that reads other values for their shapes checks them when the call runs: it stays)
        if is_a(node, IDENTITY) and not is_a(node, SHAPE_REF):
            bypassed += 1
            return node.inputs[0]
        return node.id

    graph = graph.rebuild(visit)
    live = graph.live()
    unread = [i for i, n in graph.nodes.items() if n.role == "backward" and i not in live and n.adjoint_of is not None]
    dead = set()
    if unread:      # (what requires grad is worked out only then: a map of every node of a big graph)
        req = requires_grad(before)
        dead = {i for i in unread if not req.get(graph.nodes[i].adjoint_of, True)}
    del before
    if dead:
        graph = Graph({i: n for i, n in graph.nodes.items() if i not in dead}, graph.outputs, graph.updates,
                      graph.inputs)
    return graph, PassStats("prune", changed=bypassed + len(dead))
