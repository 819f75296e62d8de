"""trace(fn, feeds): the backward sweep as a table, checked against worked examples 1 and 3 by hand."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad.explain.trace import evaluate, format_value, trace
from staticgrad.study.workloads import sigmoid_net_graph
from tests.worked import example1


def example3_units():
    """The 2-3-2-1 sigmoid network written unit by unit over the batch, so that h1 is a visible fork."""
    x1 = sg.placeholder((None,), name="x1")
    x2 = sg.placeholder((None,), name="x2")
    target = sg.placeholder((None,), name="target")
    p = {k: sg.parameter(v, name=k) for k, v in dict(
        w11=.3, w12=.6, b1=.2, w21=.4, w22=.7, b2=.5, w31=.8, w32=.1, b3=.9, u11=.7, u12=.2, u13=.8, d1=.2,
        u21=.5, u22=.4, u23=.9, d2=.5, v1=.6, v2=.8, b=.3).items()}
    h1 = sg.sigmoid(p["w11"] * x1 + p["w12"] * x2 + p["b1"])
    h2 = sg.sigmoid(p["w21"] * x1 + p["w22"] * x2 + p["b2"])
    h3 = sg.sigmoid(p["w31"] * x1 + p["w32"] * x2 + p["b3"])
    g1 = sg.sigmoid(p["u11"] * h1 + p["u12"] * h2 + p["u13"] * h3 + p["d1"])
    g2 = sg.sigmoid(p["u21"] * h1 + p["u22"] * h2 + p["u23"] * h3 + p["d2"])
    yhat = p["v1"] * g1 + p["v2"] * g2 + p["b"]
    loss = sg.mean((yhat - target) ** 2)
    h1.name, loss.name = "h1", "L"
    return x1, x2, target, p, h1, loss


FEEDS3 = {"x1": [3.0, 0.5], "x2": [2.0, 1.2], "target": [1.5, 0.9]}


def test_example1_forks_sum_what_each_use_sends(capsys):
    t = example1()
    gu, gv = sg.grad(t["y"], [t["u"], t["v"]])
    fn = sg.compile([t["y"], gu, gv], inputs=[t["u"], t["v"]])
    result = trace(fn, (5.0, 7.0))
    u_row = result.row(t["u"])
    # u receives 50+50 from u*u, 50 from t1*u and 21 from u*v; the running sums end at 171.
    assert sorted(float(p) for p in u_row["parts"]) == [21, 50, 50, 50]
    assert [float(r) for r in u_row["running"]] == list(np.cumsum([float(p) for p in u_row["parts"]]))
    assert float(u_row["running"][-1]) == 171 and float(u_row["gradient"]) == 171
    v_row = result.row(t["v"])
    assert sorted(float(p) for p in v_row["parts"]) == [15, 28, 28]
    assert float(v_row["gradient"]) == 71
    # add passes the gradient on unchanged; mul sends it times the other factor.
    add_row = result.row(t["y"])
    assert add_row["rule"] == "vjp add"
    assert all(float(s["value"]) == float(add_row["gradient"]) for s in add_row["sends"])
    t2_row = result.row(t["t2"])        # t2 = t1 * u receives 2 (from 2*t2)
    assert float(t2_row["gradient"]) == 2
    sent = {s["label"]: float(s["value"]) for s in t2_row["sends"]}
    assert sent == {"t1": 2 * 5.0, "u": 2 * 25.0}
    assert u_row["rule"] == "leaf"
    printed = capsys.readouterr().out
    assert "fork: " in printed and "=171" in printed and "t1 <- 10" in printed
    assert printed.strip() == str(result)
    # the numbers agree with what the compiled function returns
    assert fn(5.0, 7.0)[1] == 171


def test_example3_fork_at_h1_and_batch_sums():
    x1, x2, target, p, h1, loss = example3_units()
    grads = sg.grad(loss, list(p.values()))
    fn = sg.compile([loss] + grads, inputs=[x1, x2, target])
    result = trace(fn, FEEDS3, quiet=True)
    assert float(result.row(loss)["gradient"]) == 1
    # h1 forks into both second-layer units: sample 1 gets 0.00184 + 0.00129 = 0.003131
    row = result.row(h1)
    assert len(row["parts"]) == 2
    sample1 = sorted(float(part[0]) for part in row["parts"])
    assert sample1 == pytest.approx([0.00129, 0.00184], abs=5e-6)
    assert float(row["running"][-1][0]) == pytest.approx(0.003131, abs=5e-7)
    # dL/dw11: 0.00078 from sample 1 plus 0.00595 from sample 2, summed back to the scalar w11
    w11 = result.row(p["w11"])
    assert float(w11["gradient"]) == pytest.approx(0.006731, abs=5e-7)
    send = next(s for r in result.rows for s in r["sends"] if s["to"] == p["w11"].id)
    assert np.asarray(send["elements"]) == pytest.approx([0.00078, 0.00595], abs=5e-6)
    assert float(result.row(p["b"])["gradient"]) == pytest.approx(0.627673, abs=5e-7)
    outputs = fn(FEEDS3)
    assert outputs[0] == pytest.approx(0.175595, abs=5e-7)
    for param, g in zip(p.values(), outputs[1:]):
        assert float(result.row(param)["gradient"]) == pytest.approx(float(g), rel=1e-12)


def test_example3_in_matrix_form():
    net = sigmoid_net_graph()
    gW, gb = sg.grad(net["loss"], [net["W"], net["b"]])
    fn = sg.compile([gW, gb], inputs=[net["x"], net["y"]])
    result = trace(fn, {"x": [[3.0, 2.0], [0.5, 1.2]], "y": [1.5, 0.9]}, quiet=True)
    assert result.row(net["h"])["gradient"][0, 0] == pytest.approx(0.003131, abs=5e-7)
    assert result.row(net["W"])["gradient"][0, 0] == pytest.approx(0.006731, abs=5e-7)
    b_send = next(s for r in result.rows for s in r["sends"] if s["to"] == net["b"].id)
    assert float(b_send["value"]) == pytest.approx(0.627673, abs=5e-7)
    assert np.asarray(b_send["elements"]) == pytest.approx([0.0362, 0.5915], abs=5e-5)


def test_trace_leaves_parameters_alone_and_needs_gradients():
    w = sg.parameter(2.0, name="w")
    x = sg.placeholder((), name="x")
    loss = (w * x) ** 2
    gw = sg.grad(loss, w)
    step = sg.compile(loss, inputs=[x], updates=[(w, w - 0.1 * gw)])
    result = trace(step, [3.0], quiet=True)
    assert float(result.row(w)["gradient"]) == 2 * 2.0 * 9.0
    assert w.value == 2.0
    with pytest.raises(ValueError, match="no gradient"):
        trace(sg.compile(loss, inputs=[x]), [3.0], quiet=True)
    with pytest.raises(sg.FeedError, match="'x'"):
        trace(step, {}, quiet=True)
    with pytest.raises(TypeError, match="compiled function"):
        trace(loss, [3.0])


def test_values_not_computed_by_the_function_are_marked():
    t = example1()
    gu, gv = sg.grad(t["y"], [t["u"], t["v"]])
    fn = sg.compile(gu, inputs=[t["u"], t["v"]])     # gv's contributions are not part of this function
    result = trace(fn, (5.0, 7.0), quiet=True)
    assert float(result.row(t["u"])["gradient"]) == 171
    assert result.row(t["v"])["gradient"] is None
    assert "not computed by this function" in result.table()


def test_second_order_gives_one_sweep_per_grad_call():
    x = sg.placeholder((), name="x", requires_grad=True)
    y = x ** 3
    dy = sg.grad(y, x)
    d2y = sg.grad(dy, x)
    fn = sg.compile([dy, d2y], inputs=[x])
    result = trace(fn, [2.0], quiet=True)
    assert len(result.sweeps) == 2
    assert float(result.row(x, sweep=0)["gradient"]) == 12.0
    assert float(result.row(x, sweep=1)["gradient"]) == 12.0       # 6x at x=2
    assert "2 sweep(s)" in repr(result)


def test_evaluate_and_format_value():
    t = example1()
    fn = sg.compile(t["y"], inputs=[t["u"], t["v"]])
    values = evaluate(fn.ir, {t["u"].id: np.array(5.0), t["v"].id: np.array(7.0)})
    assert values[fn.ir.outputs[0]] == 556
    assert evaluate(fn.ir, {t["u"].id: np.array(5.0)})[fn.ir.outputs[0]] is None    # v not fed
    assert format_value(np.array([1.0, 2.5])) == "[1, 2.5]"
    assert format_value(np.array([[1.0, 2.0], [3.0, 4.0]])) == "[[1, 2], [3, 4]]"
    assert format_value(np.arange(100.0)).startswith("(100,) float64 mean 49.5 min 0 max 99")


def test_values_of_a_function_loaded_in_a_fresh_process(tmp_path, monkeypatch):
    import itertools

    from staticgrad import tensor as tensor_module
    from staticgrad.explain.trace import run_values
    # Each fresh process numbers its tensors from 0: the one that saves and the one that loads.
    monkeypatch.setattr(tensor_module, "_ids", itertools.count())
    x, W = sg.placeholder((None,), name="x"), sg.parameter(np.array([2.0, 3.0]), name="W")
    y = sg.exp(x) * W + 1.0
    sg.save(sg.compile([y, sg.sum(y * y)], inputs=[x], optimize=False), tmp_path / "f.npz")
    monkeypatch.setattr(tensor_module, "_ids", itertools.count())
    f = sg.load(tmp_path / "f.npz")
    X = np.array([0.0, 1.0])
    values, _ = run_values(f, {"x": X})
    assert all(values[i] is not None for i in f.ir.nodes)
    for i, expected in zip(f.ir.outputs, f(X)):
        np.testing.assert_allclose(values[i], expected, rtol=1e-12)
    picture = sg.to_dot(f, feeds={"x": X}).to_string()
    assert "= ?" not in picture and "= [3, 9.155]" in picture
    with pytest.raises(ValueError, match="loaded graph"):
        trace(f, {"x": X})


# ------------------------------------------------------------------ loops
def test_a_loop_is_one_row_of_the_sweep_with_its_values():
    from tests.explain.rnn_case import numpy_rnn, rnn
    case = rnn()
    fn, x = case["fn"], case["x"]
    result = trace(fn, x, quiet=True)
    scan = case["hs"].inputs[0]
    row = result.row(scan)
    assert row["rule"] == "vjp scan" and isinstance(row["gradient"], tuple)
    _, backward, _ = numpy_rnn(x, *[w.value for w in case["weights"]])
    _, dWx, dWh, db = backward[-1]
    sent = {s["label"]: s["value"] for s in row["sends"]}
    for name, expected in (("Wx", dWx), ("Wh", dWh), ("b", db)):
        np.testing.assert_allclose(sent[name], expected, rtol=1e-10)
    reader = result.row(case["hs"])             # its loop_output hands the gradient to the loop's value 1
    assert reader["rule"] == "vjp loop_output"
    assert reader["sends"][0]["label"] == f"{scan.label()} value 1"
    assert result.loops == [] and "iteration" not in str(result)
    with pytest.raises(KeyError, match="iterations="):
        result.loop(scan)


def test_iterations_record_each_body_value_as_a_numpy_loop_computes_it(capsys):
    from tests.explain.rnn_case import numpy_rnn, rnn
    case = rnn(T=5)
    fn, x = case["fn"], case["x"]
    hs, backward, _ = numpy_rnn(x, *[w.value for w in case["weights"]])
    result = fn.trace(x, iterations=True)
    printed = capsys.readouterr().out
    forward = result.loop(case["hs"])           # (the loop read through one of its outputs)
    assert forward.count == 5 and [k for k, _, _ in forward.shown] == list(range(5))
    for k, value in forward.values("h"):
        np.testing.assert_allclose(value, hs[k], rtol=1e-12)
    (reverse,) = [r for _, r in result.loops if r.loop.attrs["reverse"]]
    graph = reverse.graph
    names = {graph.nodes[i].name: c for c, i in enumerate(graph.inputs[:reverse.loop.attrs["n_carry"]])}
    for what, position in (("dsum_Wx", 1), ("dsum_Wh", 2), ("dsum_b", 3)):
        out = graph.outputs[names[what]]        # the running sum after each iteration
        for k, value in reverse.values(out):
            np.testing.assert_allclose(value, backward[k][position], rtol=1e-10, atol=1e-15)
    d_carry = graph.outputs[0]
    for k, value in reverse.values(d_carry):
        np.testing.assert_allclose(value, backward[k][0], rtol=1e-10, atol=1e-15)
    assert f"loop {reverse.loop.label()}: scan (5 steps, reverse), backward" in printed
    assert "5 iterations (all shown)" in printed and "carry dsum_Wx" in printed and "slice X_t" in printed


def test_long_loops_show_their_first_and_last_iterations():
    from tests.explain.rnn_case import rnn
    case = rnn(T=12)
    result = trace(case["fn"], case["x"], quiet=True, iterations=2)
    text = str(result)
    assert "12 iterations (the first and last 2 shown)" in text
    assert "(8 iterations not recorded)" in text
    assert all([k for k, _, _ in r.shown] == [0, 1, 10, 11] for _, r in result.loops)
    with pytest.raises(ValueError, match="iterations must be"):
        trace(case["fn"], case["x"], iterations=-1)


def test_iterations_of_a_function_without_gradients_print_its_loops():
    from tests.explain.test_loopdot import nested
    A, _, loss = nested()
    fn = sg.compile(loss, inputs=[A])
    a = np.arange(12.0).reshape(3, 4) / 10
    with pytest.raises(ValueError, match="no gradient"):
        trace(fn, a)
    result = trace(fn, a, quiet=True, iterations=1)
    paths = [path for path, _ in result.loops]
    assert paths[0] == () and len(paths) == 3           # the outer loop; the inner one in iterations 0 and 2
    assert "in iteration 2 of scan#" in str(result)


def test_iterations_of_a_cond_show_the_branch_taken():
    from tests.explain.test_loopdot import branch
    fn, w = branch()
    for p, name in ((1.0, "then"), (-1.0, "other")):
        result = trace(fn, (np.ones(3), p), quiet=True, iterations=True)
        shown = {(r.loop.role, r.attr) for _, r in result.loops}
        assert shown == {("forward", name), ("backward", name)}
        (cond,) = [r.loop for _, r in result.loops if r.loop.role == "forward"]
        assert result.loop(cond, name).count == 1
        assert result.loop(cond, "other" if name == "then" else "then").count == 0
        sent = result.row(cond)["sends"]
        expected = 2 * np.sin(w.value) * np.cos(w.value) if p > 0 else 2 * (np.cos(1.0) + w.value)
        np.testing.assert_allclose(sum(s["value"] for s in sent), expected, rtol=1e-12)


def test_a_loaded_function_traces_its_loops_iterations(tmp_path):
    from tests.explain.rnn_case import numpy_rnn, rnn
    case = rnn()
    sg.save(case["fn"], tmp_path / "rnn.npz")
    f = sg.load(tmp_path / "rnn.npz")
    x = case["x"]
    with pytest.raises(ValueError, match="loaded graph"):
        trace(f, x)
    result = trace(f, x, quiet=True, iterations=1)
    assert result.sweeps == [] and len(result.loops) == 2
    hs, _, _ = numpy_rnn(x, *[w.value for w in case["weights"]])
    (forward,) = [r for _, r in result.loops if not r.loop.attrs["reverse"]]
    for k, value in forward.values(forward.graph.outputs[0]):
        np.testing.assert_allclose(value, hs[k], rtol=1e-12)
    assert "it 4 = " in sg.to_dot(f, feeds=x, iterations=1).to_string()


def test_iterations_of_a_while_loop_and_of_its_reverse_tape():
    from tests.explain.test_loopdot import shrinking
    fn, w = shrinking()
    x = np.ones(3)
    result = trace(fn, x, quiet=True, iterations=2)
    v, vs = x, []
    while (v * v).sum() > 0.1:
        v = v * 0.9
        vs.append(v)
    loops = {r.loop.op + ("" if r.loop.role == "forward" else " " + r.loop.role): r for _, r in result.loops
             if r.attr == "body"}
    forward, back = loops["while_loop"], loops["reverse_tape backward"]
    assert forward.count == back.count == len(vs) == 17
    for k, value in forward.values(forward.graph.outputs[0]):
        np.testing.assert_allclose(value, vs[k], rtol=1e-12)
    # the reverse tape's running sum of dw: sum over the iterations run back of d_v(t) . v(t-1)
    dsum = back.graph.outputs[1]
    total, expected = 0.0, []
    for k in range(len(vs)):
        t = len(vs) - 1 - k
        before = vs[t - 1] if t else x
        total += float((0.9 ** k * np.ones(3)) @ before)
        expected.append(total)
    for k, value in back.values(dsum):
        assert float(value) == pytest.approx(expected[k], rel=1e-12)
    assert float(fn(x)[1]) == pytest.approx(expected[-1], rel=1e-12)
    assert "while_loop" in str(result) and "cond, 18 iterations" in str(result)
