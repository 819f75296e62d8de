"""DOT pictures: rendered with Graphviz and read back (nodes, clusters, styles, labels, edges, tooltips)."""
import os
import shutil
import xml.etree.ElementTree as ET

import numpy as np
import pydot
import pytest

import staticgrad as sg
from staticgrad import cli
from staticgrad.explain.diffdot import diff_dot
from staticgrad.explain.dot import GraphvizNotFound, save_dot, to_dot
from staticgrad.graph import Node
from staticgrad.passes import PASSES
from staticgrad.passes.stats import PassStats
from staticgrad.study.workloads import sigmoid_net_graph
from staticgrad.tensor import format_shape
from tests.worked import example1

needs_graphviz = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
SVG, XLINK = "{http://www.w3.org/2000/svg}", "{http://www.w3.org/1999/xlink}"
SHAPES = (SVG + "polygon", SVG + "path", SVG + "ellipse")


def svg_parts(path):
    """(nodes by DOT name, cluster titles, edges) of a Graphviz SVG file."""
    root = ET.parse(path).getroot()
    nodes, clusters, edges = {}, [], []
    for g in root.iter(SVG + "g"):
        kind, title = g.get("class"), g.find(SVG + "title")
        text = " ".join(t.text or "" for t in g.iter(SVG + "text"))
        shape = next((e for e in g.iter() if e.tag in SHAPES and e.get("fill") not in (None, "none")), None)
        link = next(g.iter(SVG + "a"), None)
        if kind == "node":
            nodes[title.text] = {"fill": shape.get("fill"), "dashed": shape.get("stroke-dasharray") is not None,
                                 "text": text, "tooltip": link.get(XLINK + "title") if link is not None else ""}
        elif kind == "cluster":
            clusters.append(text)
        elif kind == "edge":
            path_el = next(g.iter(SVG + "path"))
            edges.append({"title": title.text, "text": text, "stroke": path_el.get("stroke")})
    return nodes, clusters, edges


def dot_nodes(dot):
    """{name: pydot.Node} over every subgraph (iteratively)."""
    found, stack = {}, [dot]
    while stack:
        graph = stack.pop()
        for node in graph.get_node_list():
            if node.get_name() not in ("node", "edge", "graph"):
                found[node.get_name()] = node
        stack.extend(graph.get_subgraph_list())
    return found


def drawn_ids(names) -> set:
    """The graph ids of DOT node names: a small constant's copy beside another reader is named "<id>_<k>"."""
    return {n.split("_")[0] for n in names}


def effective_scope(fn, i, data):
    if data["role"] == "backward" and data["adjoint_of"] is not None:
        return fn.unoptimized.nodes[data["adjoint_of"]].scope
    return data["scope"]


def expected_clusters(fn):
    clusters = set()
    for i, data in fn.graph.nodes(data=True):
        clusters.add((data["role"], ""))
        parts = effective_scope(fn, i, data).split("/") if effective_scope(fn, i, data) else []
        for k in range(1, len(parts) + 1):
            clusters.add((data["role"], "/".join(parts[:k])))
    return clusters


@pytest.fixture
def compiled():
    net = sigmoid_net_graph()
    grads = sg.grad(net["loss"], net["params"])
    fn = sg.compile([net["loss"]] + grads, inputs=[net["x"], net["y"]])
    return net, grads, fn


@needs_graphviz
def test_rendered_svg_matches_the_graph(compiled, tmp_path):
    net, grads, fn = compiled
    path = save_dot(fn, tmp_path / "net.svg")
    nodes, clusters, edges = svg_parts(path)
    assert drawn_ids(nodes) == {str(i) for i in fn.graph.nodes}
    copies = [n for n in nodes if "_" in n]
    assert copies and all(fn.graph.nodes[int(n.split("_")[0])]["op"] == "constant" for n in copies)
    assert len(clusters) == len(expected_clusters(fn))
    assert {"layer1", "layer2", "output", "forward", "backward"} <= set(clusters)
    for i, data in fn.graph.nodes(data=True):
        assert format_shape(data["shape"]) in nodes[str(i)]["text"], data
        assert str(data["dtype"]) in nodes[str(i)]["text"]
    fills = {role: {nodes[str(i)]["fill"] for i, d in fn.graph.nodes(data=True) if d["role"] == role}
             for role in ("forward", "backward")}
    assert len(fills["forward"]) == 1 and len(fills["backward"]) == 1 and fills["forward"] != fills["backward"]
    roles = {str(i): d["role"] for i, d in fn.graph.nodes(data=True)}
    assert all(nodes[n]["dashed"] == (roles[n.split("_")[0]] == "backward") for n in nodes)
    # every input slot is one edge
    assert len(edges) == sum(len(d["slots"]) for _, _, d in fn.graph.edges(data=True))


@needs_graphviz
def test_saved_values_are_drawn_with_their_size(compiled, tmp_path):
    net, grads, fn = compiled
    _, _, edges = svg_parts(save_dot(fn, tmp_path / "net.svg"))
    saved = [e for e in edges if "saved" in e["text"]]
    g = fn.graph
    expected = sum(len(d["slots"]) for a, b, d in g.edges(data=True)
                   if g.nodes[a]["role"] == "forward" and g.nodes[a]["op"] != "constant"
                   and g.nodes[b]["role"] == "backward")
    assert expected > 0 and len(saved) == expected
    assert len({e["stroke"] for e in saved}) == 1 and saved[0]["stroke"] not in {e["stroke"] for e in edges
                                                                                 if "saved" not in e["text"]}
    U = net["params"][2]
    assert any(e["text"] == "saved 48 B" and e["title"].startswith(f"{U.id}->") for e in edges)   # (2, 3) float64
    assert any("× ? (unknown dims)" in e["text"] for e in saved)      # h is (None, 3): size per row only


def test_gradient_outputs_read_dloss_dw_by_the_names_given():
    x = sg.placeholder((None, 3), name="x")
    W = sg.parameter(np.ones((3, 2)), name="W")
    loss = sg.mean(sg.tanh(x @ W)).named("loss")
    unnamed = sg.mean(sg.tanh(x @ W))
    for y, want in ((loss, "output 1: dloss/dW"), (unnamed, f"output 1: d{unnamed.label()}/dW")):
        text = to_dot(sg.compile([y, sg.grad(y, W)], inputs=[x])).to_string()
        assert want in text and "gradient d" not in text


@needs_graphviz
def test_outputs_gradients_and_provenance_are_shown(compiled, tmp_path):
    net, grads, fn = compiled
    nodes, _, _ = svg_parts(save_dot(fn, tmp_path / "net.svg"))
    loss_id, gW_id = fn.ir.outputs[0], fn.ir.outputs[1]
    assert "output 0" in nodes[str(loss_id)]["text"]
    assert "output 1" in nodes[str(gW_id)]["text"] and "output 1: dL/dW" in nodes[str(gW_id)]["text"]
    h = nodes[str(net["h"].id)]
    assert f"built at {net['h'].source}" in h["tooltip"] and "test_dot.py:" in h["tooltip"]
    assert "name scope: layer1" in h["tooltip"]
    sigmoid_vjp = [i for i, d in fn.graph.nodes(data=True) if d["adjoint_of"] == net["h"].id and d["rule"] == "sigmoid"]
    assert sigmoid_vjp
    tip = nodes[str(sigmoid_vjp[0])]["tooltip"]
    assert "adjoint of sigmoid#" in tip and "VJP rule: sigmoid" in tip and net["h"].source in tip


def test_targets_and_stages(compiled):
    net, grads, fn = compiled
    one = to_dot(net["loss"])
    assert isinstance(one, pydot.Dot)
    from staticgrad.graph import ancestors
    assert len(drawn_ids(dot_nodes(one))) == len(ancestors([net["loss"]]))
    both = to_dot([net["loss"], grads[0]])
    names = {sub.get_name() for sub in both.get_subgraph_list()}
    assert {"cluster_forward", "cluster_backward"} <= names
    assert len(drawn_ids(dot_nodes(to_dot(fn, stage="unoptimized")))) == len(fn.unoptimized.nodes)
    assert len(drawn_ids(dot_nodes(fn.to_dot(stage="optimized")))) == fn.graph.number_of_nodes()
    with pytest.raises(ValueError, match="stage"):
        to_dot(fn, stage="final")
    with pytest.raises(TypeError, match="tensor"):
        to_dot([1, 2])


def test_update_nodes_get_their_own_cluster_and_assign_edges():
    net = sigmoid_net_graph()
    grads = sg.grad(net["loss"], net["params"])
    step = sg.compile(net["loss"], inputs=[net["x"], net["y"]],
                      updates=[(p, p - 0.1 * g) for p, g in zip(net["params"], grads)])
    dot = to_dot(step, scopes=False)
    clusters = {sub.get_name(): sub for sub in dot.get_subgraph_list()}
    assert set(clusters) == {"cluster_forward", "cluster_backward", "cluster_update"}
    updates = {n.get_name() for n in clusters["cluster_update"].get_node_list()}
    assert updates == {str(i) for i, d in step.graph.nodes(data=True) if d["role"] == "update"}
    assign = [e for e in dot.get_edge_list() if e.get("label") == "assign"]
    assert len(assign) == len(net["params"])


def test_collapse_draws_name_scopes_as_boxes(compiled):
    net, grads, fn = compiled
    everything = dot_nodes(to_dot(fn, collapse=True))
    loose = [i for i, d in fn.graph.nodes(data=True) if not effective_scope(fn, i, d)]
    # one box per scope, holding its forward nodes and the backward nodes made for them
    groups = {effective_scope(fn, i, d) for i, d in fn.graph.nodes(data=True) if effective_scope(fn, i, d)}
    assert len(everything) == len(loose) + len(groups)
    assert {"scope_layer1", "scope_layer2"} <= set(everything)
    box = everything["scope_layer1"].get("label")
    g = fn.graph
    inside = [i for i, d in g.nodes(data=True) if effective_scope(fn, i, d) == "layer1"]
    forward = sum(g.nodes[i]["role"] == "forward" for i in inside)
    # a small constant another scope's node reads too is drawn in this box as well (not counted in its roles)
    shared = {j for i in inside for j in g.predecessors(i) if g.nodes[j]["op"] == "constant" and j not in inside}
    assert f"{len(inside) + len(shared)} nodes:" in box and "transpose" in box and "W (3, 2), b1 (3,)" in box
    assert f"{forward} forward, {len(inside) - forward} backward" in box
    # backward edges between boxes still run against the arrow (the gradient flows back up), none loops
    edges = to_dot(fn, collapse=True).get_edge_list()
    assert all(e.get_source() != e.get_destination() for e in edges)
    back = {(e.get_source(), e.get_destination()) for e in edges if e.get("dir") == "back"}
    assert ("scope_layer2", "scope_layer1") in back or ("scope_layer1", "scope_layer2") in back
    only = dot_nodes(to_dot(fn, collapse=["layer1"]))
    assert "scope_layer1" in only and "scope_layer2" not in only
    assert str(net["g"].id) in only and str(net["h"].id) not in only


def test_around_draws_a_neighbourhood(compiled):
    net, grads, fn = compiled
    h = net["h"].id
    near = set(dot_nodes(to_dot(fn, around=net["h"], depth=1)))
    expected = {h} | set(fn.graph.predecessors(h)) | set(fn.graph.successors(h))
    assert near == {str(i) for i in expected}
    assert len(dot_nodes(to_dot(fn, around=h, depth=2))) > len(near)
    folded = next(i for i in fn.unoptimized.nodes if i not in fn.ir.nodes)
    with pytest.raises(ValueError, match="stage='unoptimized'"):
        to_dot(fn, around=folded)
    assert str(folded) in dot_nodes(to_dot(fn, stage="unoptimized", around=folded, depth=1))


def _label(node):
    return node.get("label") or ""


def test_values_and_gradient_flow_on_the_picture():
    t = example1()
    u, v, y = t["u"], t["v"], t["y"]
    gu, gv = sg.grad(y, [u, v])
    fn = sg.compile([y, gu, gv], inputs=[u, v])
    flow = to_dot(fn, feeds=(5.0, 7.0), view="flow")
    nodes = dot_nodes(flow)
    assert all(fn.graph.nodes[int(n)]["role"] == "forward" for n in nodes)
    assert "= 5" in _label(nodes[str(u.id)]) and "grad 171" in _label(nodes[str(u.id)])
    assert "= 556" in _label(nodes[str(y.id)])
    into_u = [e for e in flow.get_edge_list() if e.get("dir") == "back" and e.get_source() == str(u.id)]
    assert sorted(float(e.get("label").strip('"')) for e in into_u) == [21, 50, 50, 50]
    into_v = [e for e in flow.get_edge_list() if e.get("dir") == "back" and e.get_source() == str(v.id)]
    assert sorted(float(e.get("label").strip('"')) for e in into_v) == [15, 28, 28]
    full = to_dot(fn, feeds={"u": 5.0, "v": 7.0})
    labels = {n: _label(node) for n, node in dot_nodes(full).items()}
    assert "= 171" in labels[str(fn.ir.outputs[1])] and "= 71" in labels[str(fn.ir.outputs[2])]
    grad_edges = [e for e in full.get_edge_list() if e.get("label") and "saved" not in e.get("label")
                  and e.get("label") != "assign"]
    assert grad_edges and {"50", "21"} <= {e.get("label").strip('"') for e in grad_edges}


def test_values_of_a_tensor_picture_and_parameters_untouched():
    w = sg.parameter([1.0, 2.0], name="w")
    x = sg.placeholder((None, 2), name="x")
    y = sg.sum(x * w)
    dot = to_dot(y, feeds={x: np.ones((3, 2))})
    assert "= 9" in _label(dot_nodes(dot)[str(y.id)])
    step = sg.compile(y, inputs=[x], updates=[(w, w - sg.grad(y, w))])
    to_dot(step, feeds=[np.ones((3, 2))])
    assert w.value.tolist() == [1.0, 2.0]
    with pytest.raises(sg.FeedError, match="'x'"):
        to_dot(step, feeds={})


@needs_graphviz
def test_save_dot_writes_each_format(compiled, tmp_path):
    _, _, fn = compiled
    text = open(save_dot(fn, tmp_path / "g.dot")).read()
    assert text.startswith("digraph") and "cluster_backward" in text
    assert open(save_dot(fn, tmp_path / "g.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert open(save_dot(fn, tmp_path / "g.pdf"), "rb").read(5) == b"%PDF-"
    assert "<svg" in open(save_dot(to_dot(fn), str(tmp_path / "g.svg"))).read()
    with pytest.raises(ValueError, match=".jpeg"):
        save_dot(fn, tmp_path / "g.jpeg")


def test_missing_graphviz_is_named_with_how_to_install(compiled, tmp_path, monkeypatch):
    _, _, fn = compiled
    monkeypatch.setattr("staticgrad.explain.dot.shutil.which", lambda name: None)
    assert os.path.exists(save_dot(fn, tmp_path / "g.dot"))
    with pytest.raises(GraphvizNotFound, match="Graphviz's `dot`.*apt-get install graphviz") as err:
        save_dot(fn, tmp_path / "g.svg")
    assert isinstance(err.value, ValueError)


def _double_to_add(graph):
    """A test pass: 2 * x becomes x + x (a new node), so diff_dot has something added to show."""
    changed = 0

    def visit(new, node):
        nonlocal changed
        if node.op == "mul" and node.role == "forward":
            a = new.nodes[node.inputs[0]]
            if a.op == "constant" and a.value is not None and a.value.shape == () and float(a.value) == 2:
                changed += 1
                x = node.inputs[1]
                return new.add(Node("add", [x, x], shape=node.shape, dtype=node.dtype, role=node.role))
        return node.id

    return graph.rebuild(visit), PassStats("double_to_add", changed=changed)


def test_diff_dot_marks_what_each_pass_did():
    t = example1()
    gu = sg.grad(t["y"], t["u"])
    passes = [PASSES["constant_fold"], _double_to_add, PASSES["dce"]]
    fn = sg.compile([t["y"], gu], inputs=[t["u"], t["v"]], passes=passes)
    rows = {r["pass"]: r for r in fn.report().rows}
    assert rows["double_to_add"]["added_ids"] and rows["dce"]["removed_ids"] and rows["constant_fold"]["replaced_ids"]
    dot = diff_dot(fn)
    nodes = dot_nodes(dot)
    added = [i for i in fn.ir.nodes if i not in fn.unoptimized.nodes]
    assert len(drawn_ids(nodes)) == len(fn.unoptimized.nodes) + len(added)
    for i in added:
        assert "added by double_to_add" in _label(nodes[str(i)])
    for i in rows["dce"]["removed_ids"]:
        assert "removed by dce" in _label(nodes[str(i)])
    for i in rows["constant_fold"]["replaced_ids"]:
        assert "replaced by constant_fold" in _label(nodes[str(i)])
    styles = {_style(nodes[str(i)]) for i in rows["dce"]["removed_ids"]}
    assert styles and styles.isdisjoint({_style(nodes[str(i)]) for i in added})
    assert "double_to_add: 1 removed, 1 added" in dot.get_label()      # the mul went, an add came


def _style(node):
    return (node.get("fillcolor"), node.get("color"), node.get("style"))


@needs_graphviz
def test_cli_renders_every_function_a_script_compiles(tmp_path, capsys):
    script = tmp_path / "tiny.py"
    script.write_text(
        "import numpy as np\nimport staticgrad as sg\n"
        "x = sg.placeholder((None, 2), name='x')\nw = sg.parameter(np.ones(2), name='w')\n"
        "def make():\n"
        "    loss = sg.mean((x @ w) ** 2)\n"
        "    return sg.compile(loss, inputs=[x], updates=[(w, w - 0.1 * sg.grad(loss, w))])\n"
        "step = make()\npredict = sg.compile(x @ w, inputs=[x])\n")
    original = sg.Function.__init__
    out = tmp_path / "pictures"
    assert cli.main(["dot", str(script), "--out", str(out)]) == 0
    assert sg.Function.__init__ is original
    assert sorted(os.listdir(out)) == ["tiny_1.dot", "tiny_1.svg", "tiny_2.dot", "tiny_2.svg"]
    nodes, clusters, _ = svg_parts(out / "tiny_1.svg")
    assert {"forward", "backward", "update"} <= set(clusters)
    printed = capsys.readouterr().out
    assert "compiled at tiny.py:7" in printed and "compiled at tiny.py:9" in printed
    assert cli.main(["dot", str(script), "--out", str(out), "--stage", "all", "--format", "dot"]) == 0
    assert "tiny_2_diff.dot" in os.listdir(out)


def test_loaded_functions_draw_their_graph_but_have_no_history(tmp_path):
    w = sg.parameter([1.0, 2.0], name="w")
    x = sg.placeholder((None, 2), name="x")
    y = sg.sum(x * w)
    fn = sg.compile([y, sg.grad(y, w)], inputs=[x])
    sg.save(fn, tmp_path / "f.npz")
    loaded = sg.load(tmp_path / "f.npz")
    assert len(dot_nodes(to_dot(loaded, feeds=[np.ones((3, 2))]))) == len(loaded.ir.nodes)
    with pytest.raises(ValueError, match="no unoptimized graph"):
        to_dot(loaded, stage="unoptimized")
    with pytest.raises(ValueError, match="no unoptimized graph"):
        diff_dot(loaded)
    with pytest.raises(ValueError, match="loaded graph"):
        sg.trace(loaded, [np.ones((3, 2))])


def test_saved_sizes_are_exact_byte_counts_with_a_larger_unit_alongside():
    x = sg.placeholder((40, 30), name="x", requires_grad=True)
    loss = sg.sum(sg.tanh(x))
    (gx,) = sg.grad(loss, [x])
    fn = sg.compile([loss, gx], inputs=[x])
    labels = [e.get_label() for e in sg.to_dot(fn).get_edges() if "saved" in str(e.get_label())]
    assert labels and all("9600 B (9.4 KiB)" in label for label in labels)      # 40 * 30 float64


def test_gradients_of_stable_forms_keep_their_scope_and_provenance():
    # sg.grad differentiates the stable twin of log(sigmoid(.)); what it makes must still read as the
    # user's graph: twins are forward nodes in the user's scope, adjoints point at nodes that exist
    x = sg.placeholder((None, 2), name="x")
    W = sg.parameter(np.ones((2, 3)), name="W")
    with sg.name_scope("layer1"):
        loss = sg.sum(sg.log(sg.sigmoid(x @ W)))
    (g,) = sg.grad(loss, [W])
    fn = sg.compile([loss, g], inputs=[x])
    for stage, graph in (("optimized", fn.graph), ("unoptimized", fn.unoptimized.to_networkx())):
        for i, d in graph.nodes(data=True):
            if d["role"] == "backward":
                assert d["adjoint_of"] in graph, (stage, i, d["op"])
            elif d["op"] not in ("placeholder", "parameter", "constant"):
                assert d["scope"] == "layer1", (stage, i, d["op"])
    for target in (fn, [loss, g]):
        # (W, made outside any scope, is read only in layer1: it joins that box)
        assert set(dot_nodes(to_dot(target, collapse=True))) == {str(x.id), "scope_layer1"}
    fn(np.ones((4, 2)))
    assert "VJP of softplus (stable form of log) node" in fn.source


def test_a_small_constant_is_labelled_with_its_op_and_value():
    x = sg.placeholder((3,), name="x")
    labels = [d.get("label") for d in dot_nodes(to_dot(x * 2.5)).values()]
    assert any("constant <B>2.5</B>" in (lab or "") for lab in labels), labels


def test_save_dot_writes_the_dot_text_beside_a_rendered_file(tmp_path, monkeypatch):
    x = sg.placeholder((3,), name="x")
    monkeypatch.setattr(shutil, "which", lambda name: None)        # no Graphviz: the .dot is still there
    with pytest.raises(GraphvizNotFound, match="apt-get install graphviz"):
        save_dot(sg.exp(x), tmp_path / "g.svg")
    assert (tmp_path / "g.dot").read_text().startswith("digraph")
    assert not (tmp_path / "g.svg").exists()
