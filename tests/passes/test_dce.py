"""dce: exactly what the outputs, the updates and the declared inputs need survives."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad.passes import dce

from . import assert_same_values, graph_of, run_graph


def test_removes_what_no_output_reads():
    x = sg.placeholder((3,), name="x")
    y = sg.sum(x * 2.0)
    extra = sg.exp(x) + sg.cos(x)
    graph = graph_of([y, extra], [x])
    graph.outputs = [y.id]
    before = run_graph(graph, np.ones(3))
    cleaned, stats = dce.run(graph)
    assert set(cleaned.op_counts()) == {"placeholder", "constant", "mul", "sum"}
    assert stats.changed == 3                       # exp, cos, add
    assert_same_values(run_graph(cleaned, np.ones(3)), before)


def test_keeps_updates_and_what_they_need():
    x = sg.placeholder((3,), name="x")
    W = sg.parameter(np.ones(3), name="W")
    V = sg.parameter(np.ones(3), name="V")
    y = sg.sum(x * W)
    new_V = sg.sqrt(V) + W                        # read only by an update
    graph = graph_of([y], [x], updates=[(V, new_V)])
    cleaned, stats = dce.run(graph)
    assert stats.changed == 0
    assert {W.id, V.id, new_V.id} <= set(cleaned.nodes)
    assert cleaned.op_counts()["sqrt"] == 1


def test_keeps_declared_inputs_that_nothing_reads():
    x = sg.placeholder((3,), name="x")
    unused = sg.placeholder((2,), name="unused")
    graph = graph_of([sg.sum(x)], [x, unused])
    cleaned, _ = dce.run(graph)
    assert unused.id in cleaned.nodes
    fn = sg.compile(sg.sum(x), inputs=[x, unused])
    assert float(fn(np.ones(3), np.ones(2))) == 3.0
    with pytest.raises(sg.FeedError, match="unused"):     # an unused input's feed is still checked
        fn(np.ones(3), np.ones(5))


def test_result_is_closed_and_in_topological_order():
    x = sg.placeholder((3,), name="x")
    a = sg.exp(x)
    b = sg.sin(a) + a
    c = sg.cos(b)
    graph = graph_of([c, b * 5.0], [x])
    graph.outputs = [c.id]
    cleaned, _ = dce.run(graph)
    seen = set()
    for node_id, node in cleaned.nodes.items():
        assert all(i in seen for i in node.inputs), node
        seen.add(node_id)
    assert set(cleaned.outputs) <= seen


def test_running_twice_changes_nothing_more():
    x = sg.placeholder((3,), name="x")
    graph = graph_of([sg.sum(x), sg.exp(x)], [x])
    graph.outputs = graph.outputs[:1]
    once, first = dce.run(graph)
    twice, second = dce.run(once)
    assert first.changed == 1 and second.changed == 0
    assert set(twice.nodes) == set(once.nodes)


def test_leaves_its_input_graph_unchanged():
    from . import rich_graph, snapshot
    graph, feeds = rich_graph()
    before, values = snapshot(graph), run_graph(graph, *feeds)
    result, _ = dce.run(graph)
    assert snapshot(graph) == before
    assert_same_values(run_graph(result, *feeds), values)
