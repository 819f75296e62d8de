"""Numerical stabilization."""
from .. import stable
from ..rewrite import rewrite_graph
from .stats import PassStats


def run(graph):
    """Rewrite log(sigmoid(x)), log(1 - sigmoid(x)), log(softmax(x)), log(sum(exp(x))), log(1 + x) and
    exp(x) - 1 into -softplus(-x), -softplus(x), log_softmax, logsumexp, log1p and expm1.

    The results are the same math computed without overflow or cancellation, so a compiled function may
    return a finite value where the graph as written gives -inf (the point of the pass). Gradients built
    by sg.grad already come from these stable forms.
    """
    if not any(n.op in stable.TRIGGERS for n in graph.nodes.values()):
        return graph, PassStats("stabilize", changed=0, fixed_point=True)     # (no pattern can match)
    graph, fired, fixed = rewrite_graph(graph, stable.RULES)
    return graph, PassStats("stabilize", changed=fired, fixed_point=fixed)
