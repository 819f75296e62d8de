"""prune: no adjoint survives for a branch that needs no gradient; stop_gradient markers go; outputs stay."""
import numpy as np

import staticgrad as sg
from staticgrad.passes import prune
from staticgrad.tensor import building

from . import assert_same_values, graph_of, run_graph


def test_requires_grad_map():
    x = sg.placeholder((2,), name="x")
    xg = sg.placeholder((2,), name="xg", requires_grad=True)
    W = sg.parameter(np.ones(2), name="W")
    c = sg.constant(np.ones(2))
    a, b, d = x * c, xg + x, W * x
    graph = graph_of([a, b, d], [x, xg])
    req = prune.requires_grad(graph)
    assert req[x.id] is False and req[c.id] is False and req[a.id] is False
    assert req[xg.id] is True and req[W.id] is True and req[b.id] is True and req[d.id] is True


def test_stop_gradient_is_bypassed_and_values_stay():
    x = sg.placeholder((3,), name="x")
    W = sg.parameter(np.array([1.0, 2.0, 3.0]), name="W")
    y = sg.sum(sg.stop_gradient(W) * W * x)
    gW = sg.grad(y, W)
    graph = graph_of([y, gW], [x])
    before = run_graph(graph, np.ones(3))
    pruned, stats = prune.run(graph)
    assert pruned.op_counts().get("stop_gradient", 0) == 0
    assert stats.changed >= 1
    after = run_graph(pruned, np.ones(3))
    assert_same_values(after, before)
    np.testing.assert_allclose(after[1], W.value)       # d/dW of sg(W)*W*1 is sg(W)


def test_prune_counts_each_marker_it_bypasses():
    a, b = sg.placeholder((2,), name="a"), sg.placeholder((2,), name="b")
    pruned, stats = prune.run(graph_of([sg.stop_gradient(a) + sg.stop_gradient(b)], [a, b]))
    assert stats.changed == 2 and pruned.op_counts().get("stop_gradient", 0) == 0


def test_unread_adjoint_of_a_branch_without_grad_is_dropped():
    x = sg.placeholder((3,), name="x")
    W = sg.parameter(np.ones(3), name="W")
    h = sg.sin(x)                                     # needs no gradient
    y = sg.sum(h * W)
    with building(role="backward", adjoint_of=h, rule="sin"):
        wasted = sg.cos(x) * 2.0                      # what a careless grad would build for h
    with building(role="backward", adjoint_of=y, rule="sum"):
        kept = W * 3.0                                # a backward node for a branch that needs grad
    graph = graph_of([y, wasted, kept], [x])
    graph.outputs = [y.id]                            # neither extra node is read by anything now
    pruned, stats = prune.run(graph)
    assert wasted.id not in pruned.nodes
    assert pruned.op_counts().get("cos", 0) == 0
    assert kept.id in pruned.nodes                    # not prune's business: dce removes it
    assert stats.changed >= 1
    assert_same_values(run_graph(pruned, np.ones(3)), run_graph(graph, np.ones(3)))


def test_adjoint_that_an_output_reads_is_kept():
    x = sg.placeholder((3,), name="x")
    h = sg.sin(x)
    with building(role="backward", adjoint_of=h, rule="sin"):
        asked = sg.cos(x)
    graph = graph_of([sg.sum(h), asked], [x])
    pruned, _ = prune.run(graph)
    assert asked.id in pruned.nodes
    assert_same_values(run_graph(pruned, np.ones(3)), run_graph(graph, np.ones(3)))


def test_gradients_through_a_parameter_free_branch_are_never_built_end_to_end(rng):
    # The same model with the data branch differentiable or not: only the former may hold its adjoint.
    for x_grad in (False, True):
        x = sg.placeholder((None, 2), name="x", requires_grad=x_grad)
        W = sg.parameter(rng.normal(size=(2, 2)), name="W")
        feats = sg.exp(sg.sin(x))                     # sin's adjoint needs cos, exp's needs a mul
        loss = sg.sum((feats @ W) ** 2)
        grads = sg.grad(loss, [W, x] if x_grad else [W])
        fn = sg.compile(grads, inputs=[x], passes=["prune", "dce"])
        assert fn.ir.op_counts().get("cos", 0) == int(x_grad)


def test_leaves_its_input_graph_unchanged():
    from . import rich_graph, snapshot
    graph, feeds = rich_graph()
    before, values = snapshot(graph), run_graph(graph, *feeds)
    result, _ = prune.run(graph)
    assert snapshot(graph) == before
    assert_same_values(run_graph(result, *feeds), values)
