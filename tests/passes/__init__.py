"""Tests of single passes, run directly on the compiler's IR."""
import numpy as np

from staticgrad.compiler import link
from staticgrad.graph import Graph


def graph_of(outputs, inputs=(), updates=()):
    """The unoptimized IR of ``outputs`` with roles assigned, as sg.compile hands it to the passes."""
    graph = Graph.from_tensors(list(outputs), list(updates), list(inputs))
    graph.assign_roles()
    return graph


def run_graph(graph, *feeds):
    """Call the graph as compiled code (no further passes) and return its outputs as a list."""
    return link(graph, single=False)(*feeds)


def assert_same_values(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.dtype == y.dtype, (x, y)
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=0)
