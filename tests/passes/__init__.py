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
    """Call the graph as compiled code (no further passes); return its outputs and the updated parameter
    values as one list. Parameters are restored afterwards, so running a graph twice gives the same."""
    params = [n.tensor for n in graph.nodes.values() if n.op == "parameter"]
    saved = [p.value.copy() for p in params]
    try:
        outputs = link(graph, single=False)(*feeds)
        updated = {p.id: p.value.copy() for p in params}
        return list(outputs) + [updated[p] for p, _ in graph.updates]
    finally:
        for p, v in zip(params, saved):
            p.value = v


def assert_same_values(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.dtype == y.dtype, (x, y)
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=0)


def snapshot(graph):
    """Everything a pass could change about a graph, to check that it left its input alone."""
    return ({i: (n.op, tuple(n.inputs), n.shape, n.dtype, n.role, dict(n.attrs).__repr__(),
                 None if n.value is None else np.array(n.value).tolist()) for i, n in graph.nodes.items()},
            list(graph.outputs), list(graph.updates), list(graph.inputs))


def rich_graph():
    """A small training step with constants to fold, stop_gradient, an update and an unused input."""
    import staticgrad as sg
    x = sg.placeholder((None, 3), name="x")
    unused = sg.placeholder((2,), name="unused")
    W = sg.parameter(np.linspace(-1, 1, 6).reshape(3, 2), name="W")
    scale = sg.constant(2.0) * sg.constant(0.25)
    h = sg.tanh(x @ W) * scale + sg.stop_gradient(W[0])
    loss = sg.mean(h * h)
    gW = sg.grad(loss, W)
    graph = graph_of([loss, gW], [x, unused], updates=[(W, W - 0.1 * gW)])
    return graph, (np.linspace(0, 1, 12).reshape(4, 3), np.zeros(2))
