"""Graph walking (iterative), the compiler IR (Graph/Node) and its networkx view."""
import networkx as nx
import numpy as np

import staticgrad as sg
from staticgrad.graph import Graph, ancestors, to_digraph, topological_order
from staticgrad.tensor import building


def small():
    x = sg.placeholder((None, 2), name="x")
    W = sg.parameter(np.ones((2, 2)), name="W")
    h = x @ W
    y = sg.sum(h * h)
    return x, W, h, y


def test_ancestors_include_the_tensors_themselves_and_everything_upstream():
    x, W, h, y = small()
    found = ancestors([y])
    assert {x.id, W.id, h.id, y.id} <= set(found)
    assert all(found[i].id == i for i in found)
    assert set(ancestors([h])) == {x.id, W.id, h.id}


def test_digraph_edges_go_from_input_to_consumer():
    x, W, h, y = small()
    g = to_digraph([y])
    assert isinstance(g, nx.DiGraph)
    assert g.has_edge(x.id, h.id) and g.has_edge(W.id, h.id) and not g.has_edge(h.id, x.id)
    assert g.nodes[h.id]["tensor"] is h
    assert nx.is_directed_acyclic_graph(g)


def test_topological_order_puts_inputs_first():
    x, W, h, y = small()
    order = topological_order([y])
    pos = {t.id: k for k, t in enumerate(order)}
    for t in order:
        for i in t.inputs:
            assert pos[i.id] < pos[t.id]
    assert order[-1] is y


def test_walking_a_very_deep_graph_does_not_recurse():
    x = sg.placeholder((2,), name="x")
    h = x
    for _ in range(20000):
        h = sg.neg(h)
    assert len(ancestors([h])) == 20001
    order = topological_order([h])
    assert order[0] is x and order[-1] is h
    graph = Graph.from_tensors([h], inputs=[x])
    assert len(graph.live()) == 20001


def test_from_tensors_keeps_a_topological_order_and_the_roots():
    x, W, h, y = small()
    V = sg.parameter(np.zeros(2), name="V")
    new_V = V + 1.0
    graph = Graph.from_tensors([y], updates=[(V, new_V)], inputs=[x])
    seen = set()
    for node_id, node in graph.nodes.items():
        assert all(i in seen for i in node.inputs), node
        seen.add(node_id)
    assert graph.outputs == [y.id] and graph.updates == [(V.id, new_V.id)] and graph.inputs == [x.id]
    node = graph.nodes[h.id]
    assert node.op == "matmul" and node.inputs == [x.id, W.id] and node.shape == (None, 2)
    assert node.dtype == np.float64 and node.tensor is h and node.source == h.source
    assert graph.nodes[W.id].op == "parameter"


def test_roles():
    x, W, h, y = small()
    with building(role="backward", adjoint_of=y, rule="sum"):
        g = h * 2.0
    V = sg.parameter(np.zeros(2), name="V")
    step = V + sg.sum(g, axis=0)
    graph = Graph.from_tensors([y], updates=[(V, step)], inputs=[x])
    graph.assign_roles()
    roles = {i: n.role for i, n in graph.nodes.items()}
    assert roles[y.id] == roles[h.id] == roles[x.id] == roles[W.id] == "forward"
    assert roles[g.id] == "backward"
    assert roles[step.id] == "update"
    assert roles[V.id] == "update"          # a leaf only the updates read is part of the update step
    assert graph.nodes[g.id].adjoint_of == y.id and graph.nodes[g.id].rule == "sum"


def test_live_consumers_and_counts():
    x, W, h, y = small()
    extra = sg.exp(h)
    graph = Graph.from_tensors([y, extra], inputs=[x])
    graph.outputs = [y.id]
    assert extra.id not in graph.live() and y.id in graph.live()
    users = graph.consumers()
    mul = next(n for n in graph.nodes.values() if n.op == "mul")
    assert users[h.id].count(mul.id) == 2          # h * h reads h twice
    assert graph.count("mul") == 1 and graph.count() == len(graph.nodes)
    assert graph.op_counts()["placeholder"] == 1


def test_rebuild_can_replace_a_node_and_rewires_its_consumers():
    x, W, h, y = small()
    graph = Graph.from_tensors([y], inputs=[x])

    def visit(new, node):
        if node.op == "mul":                       # h * h -> square(h)
            replacement = node.copy(op="square", inputs=node.inputs[:1], id=node.id + (1 << 50))
            return new.add(replacement)
        return node.id

    rebuilt = graph.rebuild(visit)
    assert rebuilt.op_counts().get("mul", 0) == 0 and rebuilt.op_counts()["square"] == 1
    sum_node = next(n for n in rebuilt.nodes.values() if n.op == "sum")
    assert rebuilt.nodes[sum_node.inputs[0]].op == "square"
    assert graph.op_counts()["mul"] == 1            # the original graph is untouched


def test_networkx_view_has_the_documented_attributes():
    x, W, h, y = small()
    graph = Graph.from_tensors([y], inputs=[x])
    graph.assign_roles()
    g = graph.to_networkx()
    assert set(g.nodes) == set(graph.nodes)
    for i, data in g.nodes(data=True):
        assert data["op"] == graph.nodes[i].op
        assert data["shape"] == graph.nodes[i].shape and data["dtype"] == graph.nodes[i].dtype
        assert data["role"] == "forward"
    assert g.has_edge(h.id, next(i for i, d in g.nodes(data=True) if d["op"] == "mul"))
    assert g.number_of_edges() == sum(len(set(n.inputs)) for n in graph.nodes.values())


def test_reverse_order_is_networkxs_lexicographic_order_of_the_reversed_graph():
    # eager mode's tape walk and sg.grad's networkx sort must visit nodes in the same order
    from staticgrad.graph import reverse_order
    rng = np.random.default_rng(4)
    for _ in range(20):
        x = sg.placeholder((2,), name="x", requires_grad=True)
        made = [x, x * 2.0]
        for _ in range(30):
            a, b = (made[k] for k in rng.integers(0, len(made), 2))
            made.append(a * b if rng.random() < 0.5 else a + sg.sin(b))
        y = sg.sum(made[-1] + made[len(made) // 2])
        walked = [t.id for t in reverse_order([y], lambda t: True)]
        graph = to_digraph([y])
        assert walked == list(nx.lexicographical_topological_sort(graph.reverse(copy=False)))


def test_networkx_view_gives_each_loop_its_bodies_as_networkx_graphs():
    from tests.explain.rnn_case import rnn
    fn = rnn()["fn"]
    g = fn.graph
    scans = [i for i, d in g.nodes(data=True) if d["op"] == "scan"]
    assert len(scans) == 2 and nx.is_directed_acyclic_graph(g)
    for i in scans:
        body = fn.ir.nodes[i].attrs["body"].graph
        inner = g.nodes[i]["bodies"]["body"]
        assert isinstance(inner, nx.DiGraph) and set(inner.nodes) == set(body.nodes)
        assert sorted((d["inputs"][0], j) for j, d in inner.nodes(data=True) if "inputs" in d) == \
            list(enumerate(body.inputs))
        assert all(inner.nodes[o]["outputs"] for o in body.outputs)
        assert g.nodes[i]["attrs"]["body"] is fn.ir.nodes[i].attrs["body"]
    assert all("bodies" not in d for _, d in g.nodes(data=True) if d["op"] != "scan")
    assert g.nodes[fn.ir.inputs[0]]["inputs"] == [0]
