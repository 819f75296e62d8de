"""The hand-computed examples of docs/worked_examples.md, number for number, and against PyTorch."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad.graph import ancestors
from staticgrad.study.workloads import SIGMOID_NET_BATCH, SIGMOID_NET_NAMES, SIGMOID_NET_PARAMS, sigmoid_net_graph
from tests.worked import example1


def scalar(value, name, dtype="float64"):
    return sg.parameter(np.array(value, dtype=dtype), name=name)


# ------------------------------------------------------------------ 1. y = 2u^3 + 3uv + 4v^2 + 5
def test_example1_values_and_gradients(compile_both):
    t = example1(fed=False)
    gu, gv = sg.grad(t["y"], [t["u"], t["v"]])
    out, _ = compile_both([t["y"], gu, gv])
    assert [float(o) for o in out] == [556.0, 171.0, 71.0]


def test_example1_per_use_contributions_via_intermediates(compile_both):
    # What each use of u and v sends back is (adjoint of the use's result) x (the other factor).
    t = example1(fed=False)
    g_t1, g_t2, g_t4, g_t6 = sg.grad(t["y"], [t["t1"], t["t2"], t["t4"], t["t6"]])
    from_uu = g_t1 * t["u"]          # each of the two slots of u*u
    from_t1u = g_t2 * t["t1"]        # the u slot of t1*u
    from_uv = g_t4 * t["v"]          # the u slot of u*v
    from_vv = g_t6 * t["v"]          # each of the two slots of v*v
    from_vu = g_t4 * t["u"]          # the v slot of u*v
    out, _ = compile_both([from_uu, from_t1u, from_uv, from_vv, from_vu])
    assert [float(o) for o in out] == [50.0, 50.0, 21.0, 28.0, 15.0]


def test_example1_sweep_sums_four_contributions_at_u():
    # The reverse sweep recorded on the gradient shows the fork at u: 50 + 50 + 50 + 21.
    t = example1(fed=False)
    gu = sg.grad(t["y"], t["u"])
    step = next(s for s in gu.meta["sweep"] if s["node"] == t["u"].id)
    by_id = ancestors([gu])
    parts = [by_id[i] for i in step["parts"]]
    values = sg.compile(parts)()
    assert sorted(float(p) for p in values) == [21.0, 50.0, 50.0, 50.0]


def test_example1_matches_torch():
    torch = pytest.importorskip("torch")
    u = torch.tensor(5.0, dtype=torch.float64, requires_grad=True)
    v = torch.tensor(7.0, dtype=torch.float64, requires_grad=True)
    y_t = 2 * u ** 3 + 3 * u * v + 4 * v ** 2 + 5
    y_t.backward()
    t = example1(fed=False)
    out = sg.compile([t["y"]] + sg.grad(t["y"], [t["u"], t["v"]]))()
    np.testing.assert_allclose(out, [y_t.item(), u.grad.item(), v.grad.item()], rtol=1e-14)


# ------------------------------------------------------------------ 2. a two-sigmoid chain
def build_example2(values, dtype):
    x1 = sg.placeholder((), dtype=dtype, name="x1")
    x2 = sg.placeholder((), dtype=dtype, name="x2")
    u, v, d, w, b = (scalar(val, n, dtype) for val, n in zip(values, "uvdwb"))
    inner = sg.sigmoid(u * x1 + v * x2 + d)
    y = sg.sigmoid(w * inner + b)
    return (x1, x2), (u, v, d, w, b), inner, y


def test_example2_sigmoid_chain(compile_both):
    xs, params, inner, y = build_example2([0.4, 0.5, 0.6, 0.7, 0.8], "float64")
    grads = sg.grad(y, list(params))
    out, _ = compile_both([inner, y] + grads, (2.0, 3.0), inputs=list(xs))
    np.testing.assert_allclose(out[:2], [0.9478, 0.8121], atol=5e-5)
    np.testing.assert_allclose(out[2:], [0.010562, 0.015843, 0.005281, 0.144655, 0.152615], atol=5e-7)


def test_example2_data_inputs_have_no_gradient():
    xs, params, inner, y = build_example2([0.4, 0.5, 0.6, 0.7, 0.8], "float64")
    with pytest.raises(sg.GradError, match="x1"):
        sg.grad(y, [xs[0]])


def test_example2_float32_saturation(compile_both):
    # sigma(4*2 + 5*3 + 6) = sigma(29) rounds to exactly 1 in float32, so out*(1-out) = 0 and nothing
    # reaches u, v, d; w and b still get sigma(15)'s small slope.
    xs, params, inner, y = build_example2([4, 5, 6, 7, 8], "float32")
    grads = sg.grad(y, list(params))
    out, _ = compile_both([inner, y] + grads, (np.float32(2), np.float32(3)), inputs=list(xs))
    assert all(o.dtype == np.float32 for o in out)
    assert out[0] == np.float32(1.0)
    assert out[2] == 0 and out[3] == 0 and out[4] == 0
    slope = np.float32(out[1]) * (np.float32(1) - np.float32(out[1]))
    assert out[5] > 0 and out[6] > 0
    np.testing.assert_allclose(out[6], slope, rtol=1e-3)
    np.testing.assert_allclose(out[5], out[6] * 1.0, rtol=1e-6)   # dy/dw = slope * inner = slope * 1


def test_example2_float64_does_not_saturate():
    xs, params, inner, y = build_example2([4, 5, 6, 7, 8], "float64")
    gu = sg.grad(y, params[0])
    assert sg.compile(gu, inputs=list(xs))(2.0, 3.0) > 0


def test_example2_matches_torch():
    torch = pytest.importorskip("torch")
    for values, dtype, tdtype in [([0.4, 0.5, 0.6, 0.7, 0.8], "float64", torch.float64),
                                  ([4, 5, 6, 7, 8], "float32", torch.float32)]:
        tp = [torch.tensor(float(val), dtype=tdtype, requires_grad=True) for val in values]
        tu, tv, td, tw, tb = tp
        ty = torch.sigmoid(tw * torch.sigmoid(tu * 2 + tv * 3 + td) + tb)
        ty.backward()
        xs, params, inner, y = build_example2(values, dtype)
        out = sg.compile([y] + sg.grad(y, list(params)), inputs=list(xs))(2.0, 3.0)
        expected = [ty.item()] + [p.grad.item() for p in tp]
        np.testing.assert_allclose(out, expected, rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-12)


# ------------------------------------------------------------------ 3. the 2-3-2-1 sigmoid network
X3, Y3 = SIGMOID_NET_BATCH


def test_example3_network_has_twenty_parameters():
    m = sigmoid_net_graph()
    assert sum(int(np.prod(p.shape)) for p in m["params"]) == 20


def test_example3_loss_and_gradients(compile_both):
    m = sigmoid_net_graph()
    grads = sg.grad(m["loss"], m["params"] + [m["h"], m["z"]])
    out, _ = compile_both([m["loss"], m["yhat"]] + grads, (X3, Y3), inputs=[m["x"], m["y"]])
    loss, yhat, gW, gb1, gU, gd, gv, gb, gh, gz = out
    np.testing.assert_allclose(yhat, [1.5362, 1.4915], atol=5e-5)
    np.testing.assert_allclose(loss, 0.175595, atol=5e-7)
    np.testing.assert_allclose(gW[0, 0], 0.006731, atol=5e-7)
    np.testing.assert_allclose(gb, 0.627673, atol=5e-7)
    assert gW.shape == (3, 2) and gb1.shape == (3,) and gU.shape == (2, 3) and gb.shape == ()
    # The fork at sample 1's h1: it feeds both second-layer units, and the two contributions sum.
    np.testing.assert_allclose(gh[0, 0], 0.003131, atol=5e-7)
    U = m["U"].value            # row i: second-layer unit i's weights (u_i1, u_i2, u_i3)
    np.testing.assert_allclose([gz[0, 0] * U[0, 0], gz[0, 1] * U[1, 0]], [0.00184, 0.00129], atol=5e-6)
    np.testing.assert_allclose(gz[0, 0] * U[0, 0] + gz[0, 1] * U[1, 0], gh[0, 0], rtol=1e-12)


def test_example3_per_sample_contributions(compile_both):
    m = sigmoid_net_graph()
    sq = m["err"] ** 2 / 2          # L = (e1^2 + e2^2) / 2: one term per sample
    per_sample = []
    for k in range(2):
        per_sample += sg.grad(sq[k], [m["W"], m["b"]])
    out, _ = compile_both(per_sample, (X3, Y3), inputs=[m["x"], m["y"]])
    np.testing.assert_allclose([out[0][0, 0], out[2][0, 0]], [0.00078, 0.00595], atol=5e-6)
    np.testing.assert_allclose([out[1], out[3]], [0.0362, 0.5915], atol=5e-5)
    np.testing.assert_allclose(out[0][0, 0] + out[2][0, 0], 0.006731, atol=5e-7)


def test_example3_matches_torch():
    torch = pytest.importorskip("torch")
    t = {k: torch.tensor(val, dtype=torch.float64, requires_grad=True)
         for k, val in zip(SIGMOID_NET_NAMES, SIGMOID_NET_PARAMS)}
    h = torch.sigmoid(torch.tensor(X3) @ t["W"].T + t["b1"])
    h.retain_grad()
    yhat = torch.sigmoid(h @ t["U"].T + t["d"]) @ t["v"] + t["b"]
    loss = ((yhat - torch.tensor(Y3)) ** 2).mean()
    loss.backward()
    m = sigmoid_net_graph()
    out = sg.compile([m["loss"]] + sg.grad(m["loss"], m["params"] + [m["h"]]), inputs=[m["x"], m["y"]])(X3, Y3)
    np.testing.assert_allclose(out[0], loss.item(), rtol=1e-12)
    for got, k in zip(out[1:], SIGMOID_NET_NAMES):
        np.testing.assert_allclose(got, t[k].grad.numpy(), rtol=1e-10, atol=1e-14, err_msg=k)
    np.testing.assert_allclose(out[-1], h.grad.numpy(), rtol=1e-10, atol=1e-14)


# ------------------------------------------------------------------ 4. relu(a*b + c)^2
def test_example4_relu_square(compile_both):
    a, b, c = scalar(2.0, "a"), scalar(-3.0, "b"), scalar(10.0, "c")
    L = sg.relu(a * b + c) ** 2
    out, _ = compile_both([L] + sg.grad(L, [a, b, c]))
    assert [float(o) for o in out] == [16.0, -24.0, 16.0, 8.0]


def test_example4_relu_blocks_the_gradient_when_off(compile_both):
    a, b, c = scalar(2.0, "a"), scalar(-3.0, "b"), scalar(1.0, "c")
    L = sg.relu(a * b + c) ** 2
    out, _ = compile_both([L] + sg.grad(L, [a, b, c]))
    assert [float(o) for o in out] == [0.0, 0.0, 0.0, 0.0]


def test_example4_matches_torch():
    torch = pytest.importorskip("torch")
    ta, tb, tc = (torch.tensor(val, dtype=torch.float64, requires_grad=True) for val in (2.0, -3.0, 10.0))
    tL = torch.relu(ta * tb + tc) ** 2
    tL.backward()
    a, b, c = scalar(2.0, "a"), scalar(-3.0, "b"), scalar(10.0, "c")
    L = sg.relu(a * b + c) ** 2
    out = sg.compile([L] + sg.grad(L, [a, b, c]))()
    np.testing.assert_allclose(out, [tL.item(), ta.grad.item(), tb.grad.item(), tc.grad.item()])


# ------------------------------------------------------------------ 5. three uses of x; a + a
def test_example5_x_times_x_plus_x(compile_both):
    x = sg.placeholder((None,), name="x", requires_grad=True)
    y = x * x + x
    gx = sg.grad(sg.sum(y), x)
    xs = np.array([-2.0, -0.5, 0.0, 1.0, 3.5])
    out, _ = compile_both([y, gx], (xs,), inputs=[x])
    np.testing.assert_allclose(out[0], xs * xs + xs)
    np.testing.assert_allclose(out[1], 2 * xs + 1)


def test_example5_a_plus_a(compile_both):
    a = scalar(3.0, "a")
    b = a + a
    out, _ = compile_both([b, sg.grad(b, a)])
    assert [float(o) for o in out] == [6.0, 2.0]


# ------------------------------------------------------------------ 6. a tanh neuron, two ways
B6 = 6.8813735870195432


def build_neuron(exp_form):
    x1 = sg.placeholder((), name="x1", requires_grad=True)
    x2 = sg.placeholder((), name="x2", requires_grad=True)
    w1, w2, b = scalar(-3.0, "w1"), scalar(1.0, "w2"), scalar(B6, "b")
    n = x1 * w1 + x2 * w2 + b
    if exp_form:
        e = sg.exp(2 * n)
        num, den = e - 1, e + 1
        o = num / den
        return (x1, x2), [x1, w1, x2, w2, n], o, (e, num, den)
    return (x1, x2), [x1, w1, x2, w2, n], sg.tanh(n), None


@pytest.mark.parametrize("exp_form", [False, True], ids=["tanh", "exp"])
def test_example6_tanh_neuron(exp_form, compile_both):
    xs, wrt, o, _ = build_neuron(exp_form)
    out, _ = compile_both([o] + sg.grad(o, wrt), (2.0, 0.0), inputs=list(xs))
    o_v, gx1, gw1, gx2, gw2, gn = (float(v) for v in out)
    assert o_v == pytest.approx(0.7071, abs=5e-5)
    assert o_v == pytest.approx(np.sqrt(0.5), rel=1e-12)
    assert gn == pytest.approx(0.5, rel=1e-12)
    assert [gx1, gw1, gx2] == pytest.approx([-1.5, 1.0, 0.5], rel=1e-12)
    assert gw2 == 0.0


def test_example6_exp_forks_into_numerator_and_denominator(compile_both):
    xs, _, o, (e, num, den) = build_neuron(exp_form=True)
    g_e, g_num, g_den = sg.grad(o, [e, num, den])
    out, _ = compile_both([e, g_e, g_num, g_den], (2.0, 0.0), inputs=list(xs))
    e_v, g_e, g_num, g_den = (float(v) for v in out)
    assert g_num == pytest.approx(1 / (e_v + 1), rel=1e-12)
    assert g_den == pytest.approx(-(e_v - 1) / (e_v + 1) ** 2, rel=1e-12)
    assert g_e == pytest.approx(g_num + g_den, rel=1e-12)
    assert g_e == pytest.approx(2 / (e_v + 1) ** 2, rel=1e-12)


def test_example6_matches_torch():
    torch = pytest.importorskip("torch")
    leaves = [torch.tensor(val, dtype=torch.float64, requires_grad=True) for val in (2.0, -3.0, 0.0, 1.0, B6)]
    tx1, tw1, tx2, tw2, tb = leaves
    torch.tanh(tx1 * tw1 + tx2 * tw2 + tb).backward()
    for exp_form in (False, True):
        xs, wrt, o, _ = build_neuron(exp_form)
        out = sg.compile(sg.grad(o, wrt[:4]), inputs=list(xs))(2.0, 0.0)
        np.testing.assert_allclose(out, [tx1.grad.item(), tw1.grad.item(), tx2.grad.item(), tw2.grad.item()],
                                   rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------ 7. (x + y) * w
def test_example7_add_then_mul(compile_both):
    x, y, w = scalar(2.0, "x"), scalar(3.0, "y"), scalar(4.0, "w")
    z = (x + y) * w
    out, _ = compile_both([z] + sg.grad(z, [x, y, w]))
    assert [float(o) for o in out] == [20.0, 4.0, 4.0, 5.0]


def test_example7_matches_torch():
    torch = pytest.importorskip("torch")
    tx, ty, tw = (torch.tensor(val, dtype=torch.float64, requires_grad=True) for val in (2.0, 3.0, 4.0))
    ((tx + ty) * tw).backward()
    x, y, w = scalar(2.0, "x"), scalar(3.0, "y"), scalar(4.0, "w")
    z = (x + y) * w
    out = sg.compile(sg.grad(z, [x, y, w]))()
    np.testing.assert_allclose(out, [tx.grad.item(), ty.grad.item(), tw.grad.item()])
