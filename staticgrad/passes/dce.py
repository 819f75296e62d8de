"""Dead code elimination."""
from ..graph import Graph
from .stats import PassStats


def run(graph):
    """Keep exactly the nodes that the outputs, the updates and the declared inputs need.

    Declared inputs stay even when unused, so a compiled function keeps checking every feed it accepts.
    """
    live = graph.live()
    removed = len(graph.nodes) - len(live)
    if removed:
        graph = Graph({i: n for i, n in graph.nodes.items() if i in live}, graph.outputs, graph.updates,
                      graph.inputs)
    return graph, PassStats("dce", changed=removed)
