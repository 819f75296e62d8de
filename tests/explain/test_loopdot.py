"""Loops in DOT pictures: a cluster per loop holding its body, carries as back edges, one box collapsed."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad.explain.diffdot import diff_dot
from staticgrad.explain.dot import save_dot, to_dot
from staticgrad.explain.loopinfo import op_count
from staticgrad.explain.trace import format_value
from staticgrad.graph import Graph
from staticgrad.loops.ops import ScanLowering
from tests.explain.rnn_case import numpy_rnn, rnn
from tests.explain.test_dot import dot_nodes, needs_graphviz, svg_parts


def clusters(dot) -> dict:
    """{cluster name: (pydot subgraph, the name of the graph holding it)}."""
    found, stack = {}, [(dot, dot.get_name())]
    while stack:
        graph, name = stack.pop()
        for sub in graph.get_subgraph_list():
            found[sub.get_name()] = (sub, name)
            stack.append((sub, sub.get_name()))
    return found


def edges(dot) -> dict:
    """{(tail, head): [attribute dicts]} of every edge."""
    out = {}
    for e in dot.get_edge_list():
        out.setdefault((e.get_source().strip('"'), e.get_destination().strip('"')), []).append(e.get_attributes())
    return out


def joined(drawn, a, b) -> bool:
    """Whether an edge runs from ``a`` to ``b``: drawn so, or (between backward nodes, laid out against
    the flow) from ``b`` to ``a`` with dir=back."""
    return (a, b) in drawn or any(e.get("dir") == "back" for e in drawn.get((b, a), []))


def loops_of(graph):
    return {i: n for i, n in graph.nodes.items() if n.op == "scan"}


def check_loop(dot, graph, i):
    """The loop cluster of scan ``i`` of ``graph``: its body nodes, its carries as dashed back edges,
    its inputs into the placeholders they feed and its loop_outputs out of the outputs they read."""
    node = graph.nodes[i]
    body = node.attrs["body"].graph
    name = lambda j: f"L{i}_body_{j}"        # noqa: E731
    sub, _ = clusters(dot)[f"cluster_loop_{i}"]
    inside = {n.get_name() for n in sub.get_node_list()}
    assert {name(j) for j in body.nodes} <= inside
    drawn = edges(dot)
    for c in range(node.attrs["n_carry"]):
        (carry,) = [e for e in drawn[(name(body.inputs[c]), name(body.outputs[c]))] if "label" in e]
        assert carry["dir"] == "back" and carry["style"] == "dashed"
        assert carry["label"] == f"carry {body.nodes[body.inputs[c]].label()}"
    for k, x in enumerate(node.inputs):
        assert joined(drawn, str(x), name(body.inputs[k])), (k, x)
    readers = [n for n in graph.nodes.values() if n.op == "loop_output" and n.inputs == [i]]
    assert readers
    for r in readers:
        assert joined(drawn, name(body.outputs[r.attrs["index"]]), str(r.id))
    for j, n in body.nodes.items():
        for x in n.inputs:
            assert (name(x), name(j)) in drawn
    return sub


def test_forward_and_reverse_loops_of_a_compiled_rnn_are_clusters():
    case = rnn()
    fn = case["fn"]
    dot = to_dot(fn)
    scans = loops_of(fn.ir)
    assert sorted(n.role for n in scans.values()) == ["backward", "forward"]
    where = clusters(dot)
    for i, node in scans.items():
        sub = check_loop(dot, fn.ir, i)
        assert where[f"cluster_loop_{i}"][1] == f"cluster_{node.role}"
        reverse = node.attrs["reverse"]
        assert ("scan (5 steps, reverse)" if reverse else "scan (5 steps)") in sub.get("label")
        assert ("dashed" in sub.get("style")) == (node.role == "backward")
    assert "its carries" in dot.get("label")


def test_loops_of_symbolic_tensors_are_drawn_from_their_traced_bodies():
    case = rnn()
    dot = to_dot([case["loss"]] + case["grads"])
    graph = Graph.from_tensors([case["loss"]] + case["grads"])
    scans = loops_of(graph)
    assert len(scans) == 3          # the loop, the one sg.grad extended with saved values, the reverse loop
    assert all(n.attrs["body"].traced for n in scans.values())
    for i in scans:
        check_loop(dot, graph, i)
    labels = [clusters(dot)[f"cluster_loop_{i}"][0].get("label") for i in scans]
    assert sum("reverse" in label for label in labels) == 1


@needs_graphviz
def test_rendered_rnn_picture_has_a_cluster_per_loop(tmp_path):
    fn = rnn()["fn"]
    nodes, titles, drawn = svg_parts(save_dot(fn, tmp_path / "rnn.svg"))
    assert sum("scan (5 steps)" in t for t in titles) == 1 and sum("scan (5 steps, reverse)" in t for t in titles) == 1
    assert sum(e["text"].startswith("carry") for e in drawn) == sum(
        n.attrs["n_carry"] for n in loops_of(fn.ir).values())
    for i, node in loops_of(fn.ir).items():
        assert {f"L{i}_body_{j}" for j in node.attrs["body"].graph.nodes} <= set(nodes)


def test_collapsed_loops_are_one_box_each():
    fn = rnn()["fn"]
    dot = to_dot(fn, collapse=True)
    assert not [c for c in clusters(dot) if c.startswith("cluster_loop")]
    drawn = dot_nodes(dot)
    for i, node in loops_of(fn.ir).items():
        label = drawn[f"loop_{i}"].get("label")
        title = "scan (5 steps, reverse)" if node.attrs["reverse"] else "scan (5 steps)"
        assert title in label and f"body: {op_count(node.attrs['body'].graph)} ops" in label
        assert drawn[f"loop_{i}"].get("shape") == "component"
    # no body node is drawn, and the loops' readers read the box
    assert not [n for n in drawn if n.startswith("L")]
    for n in fn.ir.nodes.values():
        if n.op == "loop_output":
            assert joined(edges(dot), f"loop_{n.inputs[0]}", str(n.id))


def nested():
    A = sg.placeholder((3, 4), name="A")
    w = sg.parameter(np.array(0.5), name="w")

    def row(acc, r):
        def col(c, x):
            c = sg.tanh(c * w + x)
            return c, c
        c, cs = sg.scan(col, sg.constant(0.0), xs=r)
        return acc + c, cs
    total, css = sg.scan(row, sg.constant(0.0), xs=A)
    loss = sg.sum(css) + total
    return A, w, loss


def test_loops_in_loops_nest_clusters():
    A, w, loss = nested()
    fn = sg.compile(loss, inputs=[A])
    dot = to_dot(fn)
    where = clusters(dot)
    (outer,) = loops_of(fn.ir)
    inner = [j for j, n in fn.ir.nodes[outer].attrs["body"].graph.nodes.items() if n.op == "scan"]
    assert len(inner) == 1
    name = f"cluster_L{outer}_body_loop_{inner[0]}"
    assert where[name][1] == f"cluster_loop_{outer}"
    assert "scan (4 steps)" in where[name][0].get("label")
    carries = [e for e in dot.get_edge_list() if (e.get("label") or "").startswith("carry")]
    assert len(carries) == 2 and any(e.get_source().startswith(f"L{outer}_body_L{inner[0]}") for e in carries)
    g = sg.grad(loss, [w])[0]
    check = to_dot([loss, g])          # the reverse loop holds a forward and a reverse inner loop
    reverse = [c for c, (sub, _) in clusters(check).items() if "reverse" in (sub.get("label") or "")]
    assert len(reverse) == 2 and any(clusters(check)[c][1].startswith("cluster_loop") for c in reverse)


def test_values_per_iteration_are_written_on_body_nodes():
    case = rnn()
    fn, x = case["fn"], case["x"]
    hs, _, _ = numpy_rnn(x, *[w.value for w in case["weights"]])
    forward = next(i for i, n in loops_of(fn.ir).items() if n.role == "forward")
    body = fn.ir.nodes[forward].attrs["body"].graph
    carry_out = body.outputs[0]
    drawn = dot_nodes(to_dot(fn, feeds=x, iterations=True))
    label = drawn[f"L{forward}_body_{carry_out}"].get("label")
    tip = drawn[f"L{forward}_body_{carry_out}"].get("tooltip")
    for t in (0, 1, 3, 4):          # the first and last two of the five recorded
        assert f"it {t} = {format_value(hs[t], 4)}" in label
    assert "it 2 =" not in label
    for t in range(5):
        assert f"iteration {t}: {format_value(hs[t], max_size=64)}" in tip
    plain = dot_nodes(to_dot(fn, feeds=x))
    assert "it 0" not in plain[f"L{forward}_body_{carry_out}"].get("label")
    with pytest.raises(ValueError, match="needs feeds"):
        to_dot(fn, iterations=2)


def test_a_loop_op_without_wiring_is_connected_by_position(monkeypatch):
    fn = rnn()["fn"]
    monkeypatch.delattr(ScanLowering, "wiring")
    dot = to_dot(fn)
    drawn = edges(dot)
    for i, node in loops_of(fn.ir).items():
        body = node.attrs["body"].graph
        anchor = f"loop_{i}_anchor"
        assert anchor in dot_nodes(dot)
        for k, x in enumerate(node.inputs):
            assert joined(drawn, str(x), f"L{i}_body_{body.inputs[k]}")
        for n in fn.ir.nodes.values():
            if n.op == "loop_output" and n.inputs == [i]:
                assert joined(drawn, anchor, str(n.id))
    assert not [e for e in dot.get_edge_list() if (e.get("label") or "").startswith("carry")]


def test_flow_view_sends_the_weight_gradients_back_from_the_loop_body():
    case = rnn()
    fn = case["fn"]
    dot = to_dot(fn, stage="unoptimized", view="flow", feeds=case["x"])
    graph = fn.unoptimized
    (forward,) = [i for i, n in loops_of(graph).items() if n.role == "forward"]
    assert [c for c in clusters(dot) if c.startswith("cluster_loop")] == [f"cluster_loop_{forward}"]
    body = graph.nodes[forward].attrs["body"].graph
    back = [(a, b) for (a, b), attrs in edges(dot).items() if any(e.get("dir") == "back" and
                                                                  e.get("style") == "dashed" and
                                                                  e.get("color") == "#c0504d" for e in attrs)]
    for w in case["weights"]:
        k = graph.nodes[forward].inputs.index(w.id)
        assert (str(w.id), f"L{forward}_body_{body.inputs[k]}") in back


def test_diff_dot_marks_the_loop_the_loops_pass_merged():
    fn = rnn()["fn"]
    dot = diff_dot(fn)
    merged = [i for i in loops_of(fn.unoptimized) if i not in fn.ir.nodes]
    assert len(merged) == 1
    assert "removed by loops" in clusters(dot)[f"cluster_loop_{merged[0]}"][0].get("label")


def branch():
    x = sg.placeholder((3,), name="x")
    p = sg.placeholder((), name="p")
    w = sg.parameter(np.array([1.0, 2.0, 3.0]), name="w")
    out = sg.cond(p > 0, lambda a: sg.sin(a * w), lambda a: sg.cos(a) + w, x)
    loss = sg.sum(out * out)
    return sg.compile([loss] + sg.grad(loss, [w]), inputs=[x, p]), w


def test_a_cond_is_a_cluster_with_a_cluster_per_branch():
    fn, _ = branch()
    dot = to_dot(fn, feeds=(np.ones(3), 1.0), iterations=True)
    where, drawn = clusters(dot), edges(dot)
    conds = {i: n for i, n in fn.ir.nodes.items() if n.op == "cond"}
    assert sorted(n.role for n in conds.values()) == ["backward", "forward"]
    for i, node in conds.items():
        for attr in ("then", "other"):
            assert where[f"cluster_loop_{i}_{attr}"][1] == f"cluster_loop_{i}"
            body = node.attrs[attr].graph
            for k, x in enumerate(node.inputs[1:]):
                assert joined(drawn, str(x), f"L{i}_{attr}_{body.inputs[k]}")
        assert joined(drawn, str(node.inputs[0]), f"loop_{i}_anchor")        # pred
        for r in fn.ir.nodes.values():
            if r.op == "loop_output" and r.inputs == [i]:
                for attr in ("then", "other"):
                    out = node.attrs[attr].graph.outputs[r.attrs["index"]]
                    assert joined(drawn, f"L{i}_{attr}_{out}", str(r.id))
    forward = next(i for i, n in conds.items() if n.role == "forward")
    labels = {n.get_name(): n.get("label") for n in dot_nodes(dot).values()}
    then_out = conds[forward].attrs["then"].graph.outputs[0]
    other_out = conds[forward].attrs["other"].graph.outputs[0]
    assert f"it 0 = {format_value(np.sin(np.ones(3) * [1.0, 2.0, 3.0]), 4)}" in labels[f"L{forward}_then_{then_out}"]
    assert "it 0" not in labels[f"L{forward}_other_{other_out}"]         # the branch not taken


def shrinking():
    """v <- v w while |v|² > 0.1, counting the iterations in n; loss = sum(v) + n, and d loss / d w."""
    x = sg.placeholder((3,), name="x")
    w = sg.parameter(np.array(0.9), name="w")
    v, n = sg.while_loop(lambda s: sg.sum(s[0] * s[0]) > 0.1, lambda s: (s[0] * w, s[1] + 1.0),
                         (x, sg.constant(0.0, name="n")))
    loss = sg.sum(v) + n
    return sg.compile([loss] + sg.grad(loss, [w]), inputs=[x]), w


def test_a_while_loop_and_its_tape_are_clusters_with_their_carries():
    fn, _ = shrinking()
    dot = to_dot(fn, stage="unoptimized")
    graph = fn.unoptimized
    where, drawn = clusters(dot), edges(dot)
    whiles = {i: n for i, n in graph.nodes.items() if n.op == "while_loop"}
    (tape,) = [i for i, n in graph.nodes.items() if n.op == "reverse_tape"]
    assert len(whiles) == 2 and where[f"cluster_loop_{tape}"][1] == "cluster_backward"
    for i, node in whiles.items():
        body, test = node.attrs["body"].graph, node.attrs["cond"].graph
        for c in range(node.attrs["n_carry"]):        # the new state goes back to both bodies
            for attr, g in (("body", body), ("cond", test)):
                assert any(e.get("label", "").startswith("carry") for e in
                           drawn.get((f"L{i}_{attr}_{g.inputs[c]}", f"L{i}_body_{body.outputs[c]}"), []))
        recording = node.attrs["record"]
        if recording:        # the tape: the body's outputs after the state, into the loop_output that reads it
            (reader,) = [n for n in graph.nodes.values() if n.op == "loop_output" and n.inputs == [i]
                         and n.attrs["index"] == node.attrs["n_carry"]]
            for e in range(recording):
                assert joined(drawn, f"L{i}_body_{body.outputs[node.attrs['n_carry'] + e]}", str(reader.id))
    labels = " ".join(sub.get("label") for c, (sub, _) in where.items() if c.startswith("cluster_loop"))
    assert "while_loop (recording a tape)" in labels and "reverse_tape (over the tape, last entry first)" in labels
