"""Pictures of a training step: one box per layer and per optimizer state collapsed; uncollapsed, the updates in
their cluster in a band per layer, and small constants beside their readers."""
import re
import subprocess
import xml.etree.ElementTree as ET

import pytest

import staticgrad as sg
from staticgrad import nn, optim
from staticgrad.explain.dot import to_dot
from tests.explain.test_dot import SVG, dot_nodes, drawn_ids, needs_graphviz

LAYERS = ["mlp.0", "mlp.1", "mlp.2"]


@pytest.fixture(scope="module")
def adam_step():
    """An Adam step of a 2-8-8-1 tanh MLP on a logistic loss, compiled."""
    x, t = sg.placeholder((None, 2), name="x"), sg.placeholder((None, 1), name="t")
    model = nn.MLP([2, 8, 8, 1], activation="tanh", seed=0)
    loss = nn.binary_cross_entropy_with_logits(model(x), t)
    opt = optim.Adam(model, lr=0.01)
    return sg.compile(loss, inputs=[x, t], updates=opt.updates(loss)), model, opt


def clusters_of(dot) -> dict:
    """{cluster label: {DOT names of the nodes inside it, nested clusters' too}}."""
    found = {}

    def walk(graph, path):
        names = {n.get_name() for n in graph.get_node_list() if n.get_name() not in ("node", "edge", "graph")}
        for sub in graph.get_subgraph_list():
            names |= walk(sub, path + [(sub.get("label") or sub.get_name()).strip('"')])
        if path:
            found["/".join(path)] = names
        return names

    walk(dot, [])
    return found


def test_collapsed_adam_step_is_one_box_per_layer_and_per_optimizer_state(adam_step):
    fn, model, opt = adam_step
    dot = to_dot(fn, collapse=True)
    nodes = dot_nodes(dot)
    boxes = {name for name in nodes if name.startswith("scope_")}
    assert boxes == {"scope_mlp_0", "scope_mlp_1", "scope_mlp_2", "scope_binary_cross_entropy",
                     "scope_adam_step", "scope_adam_m", "scope_adam_v"}
    x, t = fn.feeds.nodes
    assert set(nodes) - boxes == {str(x.id), str(t.id)}      # only the inputs are drawn on their own
    clusters = clusters_of(dot)
    assert {"scope_adam_step", "scope_adam_m", "scope_adam_v"} == boxes & clusters["update"]
    # a layer's box holds its weights and their forward, backward and update nodes
    label = nodes["scope_mlp_0"].get("label")
    assert "mlp.0.weight (2, 8), mlp.0.bias (8,)" in label and "forward" in label and "update" in label
    assert re.search(r"d\S+/dmlp\.0\.weight", label) and "dmlp.1.weight" not in label     # its gradient
    moments = nodes["scope_adam_m"].get("label")
    assert all(f"{p.name}.m" in moments for p in model.parameters())
    assert "output 0" in nodes["scope_binary_cross_entropy"].get("label")


def test_uncollapsed_updates_sit_in_the_update_cluster_in_a_band_per_layer(adam_step):
    fn, model, opt = adam_step
    dot = to_dot(fn)
    clusters = clusters_of(dot)
    roles = {str(i): d["role"] for i, d in fn.graph.nodes(data=True)}
    updates = {i for i, role in roles.items() if role == "update"}
    ops = {str(i): d["op"] for i, d in fn.graph.nodes(data=True)}
    assert updates <= drawn_ids(clusters["update"])
    # (and copies of constants its nodes read, whatever their role)
    assert {roles[i] for i in drawn_ids(clusters["update"]) if ops[i] != "constant"} == {"update"}
    for layer in LAYERS:
        band = clusters[f"update/{layer}"]
        assert clusters[f"update/{layer}/{layer}/adam.m"] <= band and clusters[f"update/{layer}/{layer}/adam.v"] <= band
    assert "update/adam.step" in clusters
    # each band is ranked below the one before by invisible edges
    band_of = {name: layer for layer in LAYERS for name in clusters[f"update/{layer}"]}
    order = {(band_of[e.get_source()], band_of[e.get_destination()]) for e in dot.get_edge_list()
             if e.get("style") == "invis" and e.get_source() in band_of}
    assert order == {("mlp.0", "mlp.1"), ("mlp.1", "mlp.2")}


def test_a_small_constant_is_drawn_beside_each_scope_that_reads_it():
    x = sg.placeholder((None, 2), name="x")
    two = sg.constant(2.0, name="two")
    with sg.name_scope("a"):
        ya = x * two
    with sg.name_scope("b"):
        yb = x + two
    dot = to_dot([ya, yb])
    clusters = clusters_of(dot)
    copies = {str(two.id), f"{two.id}_1"}
    assert copies == set(dot_nodes(dot)) - {str(i.id) for i in (x, ya, yb)}
    assert len(copies & clusters["forward/a"]) == 1 and len(copies & clusters["forward/b"]) == 1
    edges = {(e.get_source(), e.get_destination()) for e in dot.get_edge_list()}
    assert edges == {(str(x.id), str(ya.id)), (str(x.id), str(yb.id)),
                     *((c, str(y.id)) for c in copies for y in (ya, yb) if c in clusters[f"forward/{y.scope}"])}
    collapsed = dot_nodes(to_dot([ya, yb], collapse=True))
    assert set(collapsed) == {str(x.id), "scope_a", "scope_b"}      # (in both boxes, none on its own)


def test_a_parameter_made_outside_any_scope_draws_with_the_scope_of_its_readers():
    x = sg.placeholder((None, 2), name="x")
    W = sg.parameter([[1.0], [2.0]], name="W")
    shared = sg.parameter(3.0, name="shared")
    with sg.name_scope("enc"):
        with sg.name_scope("l1"):
            h = x @ W * shared
        with sg.name_scope("l2"):
            y = h * shared
    names = {k: v for k, v in clusters_of(to_dot(y)).items()}
    assert str(W.id) in names["forward/enc/enc/l1"] - names.get("forward/enc/enc/l2", set())
    assert str(shared.id) in names["forward/enc"] - names["forward/enc/enc/l1"] - names["forward/enc/enc/l2"]


def rendered(dot) -> tuple:
    """(width, height) in px at 100% zoom, and {cluster's DOT name: (top, bottom) in px} of a Graphviz SVG."""
    svg = subprocess.run(["dot", "-Tsvg"], input=dot.to_string().encode(), capture_output=True, check=True).stdout
    root = ET.fromstring(svg)
    width, height = (float(root.get(k).removesuffix("pt")) * 4 / 3 for k in ("width", "height"))
    spans = {}
    for g in root.iter(SVG + "g"):
        if g.get("class") == "cluster":
            ys = [float(v) for v in re.findall(r"-?[\d.]+,(-?[\d.]+)", next(g.iter(SVG + "path")).get("d"))]
            spans[g.find(SVG + "title").text] = (min(ys) * 4 / 3, max(ys) * 4 / 3)
    return (width, height), spans


@needs_graphviz
def test_collapsed_the_adam_step_fits_a_screen_and_uncollapsed_its_bands_stack(adam_step):
    # (Graphviz 2.43: collapsed 1801 x 812 px, where it drew 4891 x 2473 before nn and optim made scopes;
    # uncollapsed 4847 x 3536, a row per layer holding its forward nodes, backward nodes and update band)
    fn, _, _ = adam_step
    (width, height), _ = rendered(to_dot(fn, collapse=True))
    assert width < 2200 and height < 1600
    _, spans = rendered(to_dot(fn))
    bands = [next(v for name, v in spans.items() if re.fullmatch(f"cluster_update_mlp_{k}_\\d+", name))
             for k in range(3)]
    for above, below in zip(bands, bands[1:]):
        assert above[1] < below[0]        # mlp.0's band over mlp.1's over mlp.2's
