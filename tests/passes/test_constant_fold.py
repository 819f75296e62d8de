"""constant_fold: every node whose inputs are all constants becomes one constant, with the same value."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad import ops
from staticgrad.passes import constant_fold

from . import assert_same_values, graph_of, run_graph


def ops_of(graph):
    return graph.op_counts()


def test_folds_a_product_of_constants():
    x = sg.placeholder((None, 3), name="x")
    prod = sg.constant(2.0) * sg.constant(3.0)
    y = prod + x
    graph = graph_of([y], [x])
    before = run_graph(graph, np.ones((2, 3)))
    folded, stats = constant_fold.run(graph)
    assert stats.changed == 1
    assert ops_of(folded).get("mul", 0) == 0
    consts = [n for n in folded.nodes.values() if n.op == "constant" and n.value.shape == () and n.value == 6.0]
    assert consts, "no constant 6.0 after folding"
    assert ops_of(folded)["add"] == 1
    assert_same_values(run_graph(folded, np.ones((2, 3))), before)


def test_folds_a_whole_chain_in_one_run():
    c = sg.constant(np.array([0.5, 2.0, 4.0]))
    x = sg.placeholder((3,), name="x")
    y = x * sg.exp(sg.log(c) * 2.0) + sg.sum(c)
    graph = graph_of([y], [x])
    before = run_graph(graph, np.ones(3))
    folded, stats = constant_fold.run(graph)
    assert stats.changed == 4          # log, mul, exp, sum; nothing that reads x
    left = ops_of(folded)
    assert left.get("log", 0) == left.get("exp", 0) == left.get("sum", 0) == 0
    assert left["mul"] == 1 and left["add"] == 1
    assert_same_values(run_graph(folded, np.ones(3)), before)


def test_nothing_that_reads_a_placeholder_or_parameter_is_folded():
    x = sg.placeholder((2,), name="x")
    W = sg.parameter(np.ones(2), name="W")
    y = sg.exp(x) + sg.sin(W) * 2.0
    graph = graph_of([y], [x])
    folded, stats = constant_fold.run(graph)
    assert stats.changed == 0
    assert ops_of(folded) == ops_of(graph)


def test_keeps_dtype():
    c = sg.constant(np.array([1.0, 4.0], dtype=np.float32))
    x = sg.placeholder((2,), dtype="float32", name="x")
    s = sg.sqrt(c) * 3.0
    y = x + s
    graph = graph_of([y], [x])
    folded, _ = constant_fold.run(graph)
    consts = [n for n in folded.nodes.values() if n.op == "constant" and n.value.shape == (2,)]
    assert any(n.value.dtype == np.float32 and np.allclose(n.value, [3.0, 6.0]) for n in consts)
    for n in consts:
        assert n.dtype == n.value.dtype
    out = run_graph(folded, np.zeros(2, dtype=np.float32))[0]
    assert out.dtype == np.float32


def test_folded_value_matches_run_time_value_even_for_inf_and_nan():
    x = sg.placeholder((3,), name="x")
    c = sg.constant(np.array([0.0, -1.0, 1.0]))
    y = x + sg.log(c)
    graph = graph_of([y], [x])
    with np.errstate(all="ignore"):
        before = run_graph(graph, np.zeros(3))[0]
    folded, stats = constant_fold.run(graph)
    assert stats.changed == 1
    after = run_graph(folded, np.zeros(3))[0]
    np.testing.assert_array_equal(after, before)      # -inf, nan, 0 (array_equal treats nan == nan here)


def test_shape_only_input_of_known_shape_counts_as_constant():
    x = sg.placeholder((2, 3), name="x")
    z = ops.zeros_like(x)
    y = z + 1.0
    graph = graph_of([y], [x])
    folded, stats = constant_fold.run(graph)
    assert ops_of(folded).get("zeros_like", 0) == 0 and ops_of(folded).get("add", 0) == 0
    np.testing.assert_array_equal(run_graph(folded, np.full((2, 3), 7.0))[0], np.ones((2, 3)))


def test_shape_only_input_of_unknown_shape_is_not_folded():
    x = sg.placeholder((None, 3), name="x")
    y = ops.zeros_like(x) + 1.0
    graph = graph_of([y], [x])
    folded, _ = constant_fold.run(graph)
    assert ops_of(folded).get("zeros_like", 0) == 1
    assert run_graph(folded, np.ones((4, 3)))[0].shape == (4, 3)


def test_folding_twice_changes_nothing_more():
    x = sg.placeholder((), name="x")
    y = x + sg.constant(2.0) * sg.constant(5.0)
    once, _ = constant_fold.run(graph_of([y], [x]))
    twice, stats = constant_fold.run(once)
    assert stats.changed == 0
    assert ops_of(twice) == ops_of(once)


def test_folded_outputs_are_copies_the_caller_may_change():
    # A fully constant output is folded to a constant; writing into what a call returned must not
    # change what the next call returns.
    y = sg.constant(np.array([1.0, 2.0])) * 2.0
    fn = sg.compile(y)
    first = fn()
    first[...] = -1.0
    np.testing.assert_array_equal(fn(), [2.0, 4.0])


def test_leaves_its_input_graph_unchanged():
    from . import rich_graph, snapshot
    graph, feeds = rich_graph()
    before, values = snapshot(graph), run_graph(graph, *feeds)
    result, _ = constant_fold.run(graph)
    assert snapshot(graph) == before
    assert_same_values(run_graph(result, *feeds), values)


def _grad_of_sum(name):
    """d sum(x) / dx for x of shape (None, 1): a broadcast_like of the constant 1 over x."""
    x = sg.placeholder((None, 1), name=name, requires_grad=True)
    (g,) = sg.grad(sg.sum(x), [x])
    assert g.op == "broadcast_like"
    return x, g


def _no_new_unread_nodes(before, after):
    """Nodes the pass added are all read: a fold it gave up on leaves nothing behind."""
    read = {i for n in after.nodes.values() for i in n.inputs} | set(after.outputs)
    return set(after.nodes) - set(before.nodes) <= read


def test_a_constant_that_widens_a_broadcast_like_is_not_folded_into_it():
    # ones_like(x) * [1, 2, 3] is (N, 3); a broadcast_like over x would be (N, 1)
    x, g = _grad_of_sum("x")
    y = g * sg.constant(np.array([1.0, 2.0, 3.0]))
    graph = graph_of([y], [x])
    before = run_graph(graph, np.ones((2, 1)))
    folded, _ = constant_fold.run(graph)
    assert_same_values(run_graph(folded, np.ones((2, 1))), before)
    assert before[0].shape == (2, 3)
    assert _no_new_unread_nodes(graph, folded)


def test_broadcasts_over_two_references_are_not_folded_onto_one():
    # at run time the references may be 4 and 1 rows: the sum has 4 whichever comes last
    x1, g1 = _grad_of_sum("x1")
    x2, g2 = _grad_of_sum("x2")
    graph = graph_of([g1 + g2], [x1, x2])
    feeds = (np.ones((4, 1)), np.ones((1, 1)))
    before = run_graph(graph, *feeds)
    folded, _ = constant_fold.run(graph)
    assert_same_values(run_graph(folded, *feeds), before)
    assert _no_new_unread_nodes(graph, folded)


def test_a_broadcast_like_of_the_nodes_own_shape_still_folds():
    x, g = _grad_of_sum("x")
    y = (g * 3.0) * sg.constant(np.array([[2.0]]))
    graph = graph_of([y], [x])
    before = run_graph(graph, np.ones((5, 1)))
    folded, _ = constant_fold.run(graph)
    assert ops_of(folded).get("mul", 0) == 0
    assert_same_values(run_graph(folded, np.ones((5, 1))), before)


def test_a_broadcast_like_over_a_reference_of_unknown_size_keeps_its_run_time_check():
    # grad_output (5, 3) against y (None, 3): the folded seed has a static shape, but a call with 4 rows
    # must still fail, as it does unoptimized (a broadcast_to would have returned 5 rows)
    v = sg.placeholder((None, 3), requires_grad=True, name="v")
    (g,) = sg.grad(v * 2.0, [v], grad_output=np.ones((5, 3)))
    for optimize in (True, False):
        fn = sg.compile(g, inputs=[v], optimize=optimize)
        np.testing.assert_array_equal(fn(np.ones((5, 3))), np.full((5, 3), 2.0))
        with pytest.raises(sg.ShapeError, match="broadcast"):
            fn(np.ones((4, 3)))


def test_an_exponent_folded_into_a_broadcast_keeps_numpys_per_element_power():
    # broadcast(0.25) * 2 is a fresh array of 0.5, read per element by numpy's power (pow(-inf) is inf);
    # folded into a broadcast view of one 0.5, numpy would read one exponent and take sqrt (nan)
    from staticgrad.ops.broadcast import broadcast_to
    X = np.tile([-np.inf, -0.0, 4.0, 9.0], 16).reshape(8, 8)
    x = sg.placeholder((8, 8), name="x")
    y = x ** (broadcast_to(sg.constant(0.25), (8, 8)) * 2.0)
    with np.errstate(all="ignore"):
        want = np.power(X, np.broadcast_to(0.25, (8, 8)) * 2.0)
        for optimize in (True, False):
            got = sg.compile(y, inputs=[x], optimize=optimize)(X)
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
