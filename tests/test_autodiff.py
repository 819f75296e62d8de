"""sg.grad: the calling conventions, forks, intermediates, broadcasting, VJPs and higher derivatives."""
import os
import sys

import numpy as np
import pytest

import staticgrad as sg
from staticgrad import eager


# ------------------------------------------------------------------ calling conventions
def test_list_in_gives_list_out():
    W = sg.parameter(np.ones((2, 3)), name="W")
    out = sg.grad(sg.sum(W * W), [W])
    assert isinstance(out, list) and len(out) == 1
    assert isinstance(out[0], sg.Tensor) and out[0].shape == (2, 3)


def test_tensor_in_gives_tensor_out():
    W = sg.parameter(np.ones((2, 3)), name="W")
    out = sg.grad(sg.sum(W * W), W)
    assert isinstance(out, sg.Tensor) and out.shape == (2, 3)


def test_gradients_keep_shape_and_dtype_of_what_they_differentiate(rng):
    A = sg.parameter(rng.normal(size=(3, 4)).astype(np.float32), name="A")
    x = sg.placeholder((None, 3), dtype="float32", name="x", requires_grad=True)
    y = sg.mean(sg.tanh(x @ A))
    gA, gx = sg.grad(y, [A, x])
    assert gA.shape == (3, 4) and gx.shape == (None, 3)
    assert gA.dtype == np.float32 and gx.dtype == np.float32
    out = sg.compile([gA, gx], inputs=[x])(rng.normal(size=(5, 3)).astype(np.float32))
    assert out[0].dtype == np.float32 and out[1].dtype == np.float32 and out[1].shape == (5, 3)
    # the seed dy/dy = 1 has y's dtype too
    y = sg.sum(x * x)
    assert sg.grad(y, y).dtype == np.float32


def test_a_gradient_that_does_not_depend_on_y_still_leads_to_it():
    # y does not read w: its gradient is zeros, made of no adjoint; the explain tools still reach y, and
    # its forward values, through the gradient's meta
    from staticgrad.explain.trace import tensor_closure
    from staticgrad.graph import Graph

    u, w = sg.placeholder((2,), name="u", requires_grad=True), sg.placeholder((2,), name="w", requires_grad=True)
    y = sg.sum(u * 2.0)
    gu, gw = sg.grad(y, [u, w])
    assert y.id in tensor_closure(Graph.from_tensors([gw], [], [u, w]))


def test_several_wrt_at_once_match_one_at_a_time(rng, compile_both):
    a = sg.parameter(rng.normal(size=3), name="a")
    b = sg.parameter(rng.normal(size=3), name="b")
    y = sg.sum(sg.sin(a) * b + a * a)
    together, _ = compile_both(sg.grad(y, [a, b]))
    alone_a, _ = compile_both(sg.grad(y, a))
    alone_b, _ = compile_both(sg.grad(y, b))
    np.testing.assert_allclose(together[0], alone_a)
    np.testing.assert_allclose(together[1], alone_b)
    np.testing.assert_allclose(alone_a, np.cos(a.value) * b.value + 2 * a.value)
    np.testing.assert_allclose(alone_b, np.sin(a.value))


# ------------------------------------------------------------------ errors
def test_placeholder_without_requires_grad_is_an_error():
    p = sg.placeholder((3,), name="pixels")
    with pytest.raises(sg.GradError, match="pixels") as info:
        sg.grad(sg.sum(p * 2), [p])
    assert isinstance(info.value, ValueError)
    assert "test_autodiff.py:" in str(info.value)


def test_constant_is_an_error():
    c = sg.constant(np.ones(3), name="c")
    W = sg.parameter(np.ones(3), name="W")
    with pytest.raises(sg.GradError):
        sg.grad(sg.sum(c * W), [W, c])


def test_non_scalar_y_without_grad_output_is_an_error():
    W = sg.parameter(np.ones((2, 3)), name="W")
    with pytest.raises(sg.GradError, match=r"\(2, 3\)"):
        sg.grad(W * 2, [W])


def test_grad_output_of_the_wrong_shape_is_an_error():
    W = sg.parameter(np.ones((2, 3)), name="W")
    with pytest.raises(ValueError):
        sg.grad(W * 2, [W], grad_output=np.ones((4,)))


@pytest.mark.parametrize("optimize", [True, False])
def test_grad_output_with_run_time_sizes_broadcasts_to_y_when_called(optimize):
    # (None, 3) and (None, 3) agree statically but may be 1 and 4 rows: the gradient has v's shape, as in
    # eager mode, which broadcasts grad_output to y's shape.
    v = sg.placeholder((None, 3), requires_grad=True, name="v")
    go = sg.placeholder((None, 3), name="go")
    fn = sg.compile(sg.grad(v * 2.0, v, grad_output=go), inputs=[v, go], optimize=optimize)
    np.testing.assert_array_equal(fn(np.ones((4, 3)), np.array([[1.0, 2.0, 3.0]])), np.tile([2.0, 4.0, 6.0], (4, 1)))
    np.testing.assert_array_equal(fn(np.ones((2, 3)), np.full((2, 3), 5.0)), np.full((2, 3), 10.0))
    with pytest.raises(ValueError):
        fn(np.ones((4, 3)), np.ones((2, 3)))


# ------------------------------------------------------------------ what grad computes
def test_wrt_not_reachable_gets_zeros_of_its_shape(compile_both):
    W = sg.parameter(np.ones(3), name="W")
    unused = sg.parameter(np.ones((2, 4), dtype=np.float32), name="unused")
    g_unused, g_W = sg.grad(sg.sum(W * 3), [unused, W])
    (zeros, three), _ = compile_both([g_unused, g_W])
    assert zeros.shape == (2, 4) and zeros.dtype == np.float32 and not zeros.any()
    np.testing.assert_array_equal(three, [3.0, 3.0, 3.0])


def test_unreachable_placeholder_with_unknown_size_gets_zeros_of_the_fed_shape(compile_both):
    x = sg.placeholder((None, 3), name="x", requires_grad=True)
    W = sg.parameter(np.ones(3), name="W")
    gx = sg.grad(sg.sum(W), x)
    out, _ = compile_both(gx, (np.ones((4, 3)),), inputs=[x])
    np.testing.assert_array_equal(out, np.zeros((4, 3)))


def test_fork_sums_every_use(compile_both):
    # y = x*x*x + sin(x) + x: five uses of x.
    x = sg.placeholder((None,), name="x", requires_grad=True)
    y = sg.sum(x * x * x + sg.sin(x) + x)
    xs = np.linspace(-2, 2, 7)
    out, _ = compile_both(sg.grad(y, x), (xs,), inputs=[x])
    np.testing.assert_allclose(out, 3 * xs ** 2 + np.cos(xs) + 1)


def test_gradient_wrt_an_intermediate_is_the_total_derivative(rng, compile_both):
    x = sg.placeholder((None, 2), name="x")
    W = sg.parameter(rng.normal(size=(2, 3)), name="W")
    h = x @ W
    # h reaches y three ways: directly, through h*h and through exp(h).sum(axis=1)
    y = sg.sum(h * h + h) + sg.sum(sg.exp(h).sum(axis=1) * 2)
    gh, gW = sg.grad(y, [h, W])
    X = rng.normal(size=(4, 2))
    (gh_v, gW_v), _ = compile_both([gh, gW], (X,), inputs=[x])
    H = X @ W.value
    np.testing.assert_allclose(gh_v, 2 * H + 1 + 2 * np.exp(H))
    np.testing.assert_allclose(gW_v, X.T @ gh_v)   # the chain rule continues from the intermediate


def test_gradient_wrt_an_intermediate_that_is_also_wrt_upstream(compile_both):
    a = sg.parameter(1.5, name="a")
    b = sg.exp(a)
    c = b * b
    ga, gb, gc = sg.grad(c, [a, b, c])
    out, _ = compile_both([ga, gb, gc])
    e = np.exp(1.5)
    np.testing.assert_allclose(out, [2 * e * e, 2 * e, 1.0])


def test_gradient_wrt_y_itself_is_one(compile_both):
    a = sg.parameter(np.array([1.0, 2.0]), name="a")
    y = sg.sum(a * a)
    out, _ = compile_both(sg.grad(y, y))
    assert out.shape == () and float(out) == 1.0


def test_no_gradient_through_stop_gradient_and_comparisons(compile_both):
    a = sg.parameter(np.array([1.0, -2.0, 3.0]), name="a")
    y = sg.sum(sg.stop_gradient(a) * a + sg.where(a > 0, a, 0.0))
    out, _ = compile_both(sg.grad(y, a))
    np.testing.assert_allclose(out, a.value + (a.value > 0))


@pytest.mark.parametrize("param_shape, axes", [((3,), (0,)), ((1, 3), (0,)), ((), (0, 1))],
                         ids=["bias", "row", "scalar"])
def test_broadcast_gradients_are_reduced_to_the_input_shape(param_shape, axes, rng, compile_both):
    x = sg.placeholder((None, 3), name="x")
    b = sg.parameter(np.zeros(param_shape), name="b")
    upstream = rng.normal(size=(5, 3))
    y = sg.sum((x + b) * upstream[:1])
    X = rng.normal(size=(5, 3))
    gb, _ = compile_both(sg.grad(y, b), (X,), inputs=[x])
    expected = np.broadcast_to(upstream[:1], (5, 3)).sum(axis=axes).reshape(param_shape)
    assert gb.shape == param_shape
    np.testing.assert_allclose(gb, expected)


def test_broadcast_over_inner_axis_keeps_dims(rng, compile_both):
    x = sg.placeholder((None, 4, 5), name="x")
    s = sg.parameter(rng.normal(size=(4, 1)), name="s")
    y = sg.sum(sg.square(x * s))
    X = rng.normal(size=(2, 4, 5))
    gs, _ = compile_both(sg.grad(y, s), (X,), inputs=[x])
    assert gs.shape == (4, 1)
    np.testing.assert_allclose(gs, (2 * X * X * s.value).sum(axis=(0, 2))[:, None])


@pytest.mark.parametrize("make", [lambda x: sg.broadcast_to(x, (2, 3)),
                                  lambda x: sg.getitem_grad(x, (3, 3), (slice(1, None),))],
                         ids=["broadcast_to", "getitem_grad"])
def test_an_unknown_size_broadcast_by_an_op_without_siblings_is_summed_at_run_time(make, compile_both):
    # Found by tests/test_fuzz.py: x (None, 1) fed one row is stretched to 2 rows by an op with one tensor
    # input; the gradient took the unknown axis as unstretched and came out (2, 1) instead of (1, 1).
    x = sg.placeholder((None, 1), name="x", requires_grad=True)
    w = np.arange(6.0).reshape(2, 3)
    d = sg.grad(sg.sum(make(x)[-2:] * w), x)
    assert d.shape == (None, 1)
    for fed, want in ((np.ones((1, 1)), w.sum(keepdims=True)), (np.ones((2, 1)), w.sum(axis=1, keepdims=True))):
        out, _ = compile_both(d, (fed,), inputs=[x])
        np.testing.assert_array_equal(out, want)
        xe = eager.tensor(fed, requires_grad=True)
        np.testing.assert_array_equal(eager.grad(sg.sum(make(xe)[-2:] * w), xe).value, want)


def test_matmul_gradient_knowing_a_size_its_input_leaves_unknown(compile_both):
    # Found by tests/test_fuzz.py: b's gradient a^T @ g is (None, 1, 1) for b (None, None, 1), and the
    # sum_like that reduces it over the batch axis was refused ((None, None, 1) "did not broadcast").
    a = sg.placeholder((None, None, 1), name="a", requires_grad=True)
    b = sg.placeholder((None, None, 1), name="b", requires_grad=True)
    da, db = sg.grad(sg.sum(a @ b), [a, b])
    A, B = np.full((2, 3, 1), 2.0), np.full((1, 1, 1), 3.0)
    (ga, gb), _ = compile_both([da, db], (A, B), inputs=[a, b])
    np.testing.assert_array_equal(ga, np.full((2, 3, 1), 3.0))
    np.testing.assert_array_equal(gb, np.full((1, 1, 1), 12.0))


def test_bias_gradient_follows_the_batch_size(rng):
    x = sg.placeholder((None, 3), name="x")
    b = sg.parameter(np.zeros(3), name="b")
    f = sg.compile(sg.grad(sg.sum(x + b), b), inputs=[x])
    np.testing.assert_allclose(f(np.ones((2, 3))), [2, 2, 2])
    np.testing.assert_allclose(f(np.ones((7, 3))), [7, 7, 7])


def test_vjp_with_grad_output_array_and_tensor(rng, compile_both):
    A = sg.parameter(rng.normal(size=(3, 2)), name="A")
    x = sg.parameter(rng.normal(size=2), name="x")
    y = sg.tanh(A @ x)                       # shape (3,)
    u = np.array([1.0, -2.0, 0.5])
    slope = 1 - np.tanh(A.value @ x.value) ** 2
    from_array = sg.grad(y, [A, x], grad_output=u)
    u_ph = sg.placeholder((3,), name="u")
    from_tensor = sg.grad(y, [A, x], grad_output=u_ph)
    (gA, gx), _ = compile_both(from_array)
    np.testing.assert_allclose(gA, np.outer(u * slope, x.value))
    np.testing.assert_allclose(gx, A.value.T @ (u * slope))
    (gA2, gx2), _ = compile_both(from_tensor, (u,), inputs=[u_ph])
    np.testing.assert_allclose(gA2, gA)
    np.testing.assert_allclose(gx2, gx)


def test_vjp_of_unknown_batch_size(rng, compile_both):
    x = sg.placeholder((None, 3), name="x", requires_grad=True)
    y = x * x                                  # shape (None, 3)
    g_out = sg.placeholder((None, 3), name="g_out")
    X, G = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    out, _ = compile_both(sg.grad(y, x, grad_output=g_out), (X, G), inputs=[x, g_out])
    np.testing.assert_allclose(out, 2 * X * G)


def test_requires_grad_propagates_to_non_leaves():
    x = sg.placeholder((None, 3), name="x")
    xg = sg.placeholder((None, 3), name="xg", requires_grad=True)
    W = sg.parameter(np.ones((3, 3)), name="W")
    c = sg.constant(2.0)
    assert not x.requires_grad and not c.requires_grad
    assert xg.requires_grad and W.requires_grad
    assert not (x * c + 1).requires_grad
    assert not sg.exp(x).sum().requires_grad
    assert (x @ W).requires_grad
    assert (sg.exp(xg) * c).requires_grad
    assert sg.sum(x + (c * W)).requires_grad


def test_compiled_gradients_read_parameter_values_at_call_time():
    # Gradients are graph tensors: changing the parameter's value changes what they compute.
    W = sg.parameter(np.array([1.0, 2.0]), name="W")
    f = sg.compile(sg.grad(sg.sum(W ** 3), W))
    np.testing.assert_allclose(f(), [3.0, 12.0])
    W.value = np.array([2.0, -1.0])
    np.testing.assert_allclose(f(), [12.0, 3.0])


# ------------------------------------------------------------------ higher order
def test_second_and_third_derivative_of_a_scalar(compile_both):
    s = sg.parameter(0.7, name="s")
    y = sg.exp(s * s)
    d1 = sg.grad(y, s)
    d2 = sg.grad(d1, s)
    d3 = sg.grad(d2, s)
    out, _ = compile_both([d1, d2, d3])
    v = 0.7
    e = np.exp(v * v)
    np.testing.assert_allclose(out, [2 * v * e, (2 + 4 * v * v) * e, (12 * v + 8 * v ** 3) * e], rtol=1e-12)


def test_mixed_partial_derivative(compile_both):
    x, y = sg.parameter(1.5, name="x"), sg.parameter(-0.5, name="y")
    f = x * x * y * y * y
    dxy = sg.grad(sg.grad(f, x), y)
    dyx = sg.grad(sg.grad(f, y), x)
    out, _ = compile_both([dxy, dyx])
    np.testing.assert_allclose(out, [6 * 1.5 * 0.25, 6 * 1.5 * 0.25])


def test_hessian_vector_product(rng, compile_both):
    # f(w) = 1/2 w.A.w + sum(exp(w)); H = (A + A^T)/2 + diag(exp(w))
    n = 4
    A_v = rng.normal(size=(n, n))
    A = sg.constant(A_v, name="A")
    w = sg.parameter(rng.normal(size=n), name="w")
    f = 0.5 * sg.sum(w * (A @ w)) + sg.sum(sg.exp(w))
    gw = sg.grad(f, w)
    v = sg.placeholder((n,), name="v")
    hv = sg.grad(sg.sum(gw * v), w)
    V = rng.normal(size=n)
    out, _ = compile_both([gw, hv], (V,), inputs=[v])
    H = (A_v + A_v.T) / 2 + np.diag(np.exp(w.value))
    np.testing.assert_allclose(out[0], (A_v + A_v.T) / 2 @ w.value + np.exp(w.value), rtol=1e-12)
    np.testing.assert_allclose(out[1], H @ V, rtol=1e-12)


def test_full_hessian_row_by_row(rng, compile_both):
    w = sg.parameter(rng.normal(size=3), name="w")
    f = sg.sum(sg.sin(w)) * sg.sum(w * w)
    gw = sg.grad(f, w)
    rows = [sg.grad(gw[i], w) for i in range(3)]
    out, _ = compile_both(rows)
    W = w.value
    s, q = np.sin(W).sum(), (W * W).sum()
    H = -np.diag(np.sin(W)) * q + 2 * np.outer(np.cos(W), W) + 2 * np.outer(W, np.cos(W)) + 2 * s * np.eye(3)
    np.testing.assert_allclose(np.stack(out), H, rtol=1e-10, atol=1e-12)


def test_hessian_vector_product_of_an_mlp_matches_torch(rng):
    torch = pytest.importorskip("torch")
    X = rng.normal(size=(6, 3))
    W1_v, W2_v, V1, V2 = rng.normal(size=(3, 4)), rng.normal(size=(4, 2)), rng.normal(size=(3, 4)), \
        rng.normal(size=(4, 2))
    x = sg.placeholder((None, 3), name="x")
    W1, W2 = sg.parameter(W1_v, name="W1"), sg.parameter(W2_v, name="W2")
    loss = sg.mean(sg.logsumexp(sg.tanh(x @ W1) @ W2, axis=1))
    g1, g2 = sg.grad(loss, [W1, W2])
    hv = sg.grad(sg.sum(g1 * V1) + sg.sum(g2 * V2), [W1, W2])
    out = sg.compile(hv, inputs=[x])(X)

    tW1 = torch.tensor(W1_v, requires_grad=True)
    tW2 = torch.tensor(W2_v, requires_grad=True)
    tloss = torch.logsumexp(torch.tanh(torch.tensor(X) @ tW1) @ tW2, dim=1).mean()
    tg1, tg2 = torch.autograd.grad(tloss, [tW1, tW2], create_graph=True)
    th1, th2 = torch.autograd.grad((tg1 * torch.tensor(V1)).sum() + (tg2 * torch.tensor(V2)).sum(), [tW1, tW2])
    np.testing.assert_allclose(out[0], th1.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(out[1], th2.numpy(), rtol=1e-9, atol=1e-12)


def test_gradient_of_an_mlp_loss_matches_torch(rng):
    torch = pytest.importorskip("torch")
    X, T = rng.normal(size=(5, 4)), rng.integers(0, 3, size=5)
    Ws = [rng.normal(size=s) for s in [(4, 6), (6,), (6, 3), (3,)]]
    x = sg.placeholder((None, 4), name="x", requires_grad=True)
    t = sg.placeholder((None,), dtype="int64", name="t")
    W1, b1, W2, b2 = (sg.parameter(v, name=n) for v, n in zip(Ws, ["W1", "b1", "W2", "b2"]))
    loss = sg.softmax_cross_entropy(sg.relu(x @ W1 + b1) @ W2 + b2, t)
    out = sg.compile([loss] + sg.grad(loss, [W1, b1, W2, b2, x]), inputs=[x, t])(X, T)

    tp = [torch.tensor(v, requires_grad=True) for v in Ws]
    tx = torch.tensor(X, requires_grad=True)
    tloss = torch.nn.functional.cross_entropy(torch.relu(tx @ tp[0] + tp[1]) @ tp[2] + tp[3], torch.tensor(T))
    tloss.backward()
    np.testing.assert_allclose(out[0], tloss.item(), rtol=1e-12)
    for got, want in zip(out[1:], [p.grad for p in tp] + [tx.grad]):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-14)


def test_backward_nodes_name_the_grad_line_or_a_custom_vjps_own_line():
    from staticgrad.ops.registry import REGISTRY, apply, defop, same_spec

    def double_vjp(g, out, x):
        return (g * 2.0,)                                   # the line a custom VJP's nodes should name

    vjp_line = double_vjp.__code__.co_firstlineno + 1
    defop("test_double", lambda x: 2.0 * x, same_spec, double_vjp)
    try:
        x = sg.placeholder((3,), name="x", requires_grad=True)
        y = sg.sum(sg.sin(apply("test_double", (x,))))
        (gx,) = sg.grad(y, [x]); grad_line = sys._getframe().f_lineno  # noqa: E702 (one line: the same line number)
    finally:
        del REGISTRY["test_double"]          # other tests enumerate the registry
    lines = set()
    stack, seen = [gx], set()
    while stack:
        t = stack.pop()
        if t.id in seen or t.role != "backward":
            continue
        seen.add(t.id)
        lines.add((t.adjoint_of.op if t.adjoint_of is not None else None, t.source))
        stack.extend(t.inputs)
    here = os.path.basename(__file__)
    assert ("test_double", f"{here}:{vjp_line}") in lines
    assert ("sin", f"{here}:{grad_line}") in lines


def test_grad_output_with_run_time_sizes_where_y_has_static_ones():
    x = sg.placeholder((1, 2), name="x", requires_grad=True)
    go = sg.placeholder((None, None), name="go")
    (g,) = sg.grad(x * 3.0, [x], grad_output=go)
    assert g.shape == (1, 2)
    np.testing.assert_array_equal(sg.compile(g, inputs=[x, go])(np.ones((1, 2)), np.array([[1.0, 2.0]])),
                                  [[3.0, 6.0]])


def test_no_gradient_flows_through_boolean_values():
    # abs(x > 0) is a step function of x: its derivative is 0, and abs's rule must not run on booleans
    from staticgrad import eager
    x = sg.placeholder((2,), name="x", requires_grad=True)
    f = lambda x: sg.sum(sg.abs(x > 0.0) * x)   # noqa: E731
    (g,) = sg.grad(f(x), [x])
    X = np.array([-1.0, 2.0])
    np.testing.assert_array_equal(sg.compile(g, inputs=[x])(X), [0.0, 1.0])
    e = eager.tensor(X, requires_grad=True)
    f(e).backward()
    np.testing.assert_array_equal(e.grad, [0.0, 1.0])


def test_complex_values_have_no_gradient_rather_than_a_wrong_one():
    # The VJP rules are written for real values (they never conjugate): refuse, do not mislead.
    from staticgrad import eager
    with pytest.raises(sg.GradError, match="real floating"):
        sg.placeholder((2,), dtype="complex128", requires_grad=True)
    with pytest.raises(TypeError, match="real floating"):
        sg.parameter(np.array([1 + 2j]))
    with pytest.raises(sg.GradError, match="real floating"):
        eager.tensor(np.array([1 + 2j]), requires_grad=True)
    x = sg.placeholder((2,), requires_grad=True, name="x")
    with pytest.raises(sg.GradError, match="complex value at (abs|mul)"):
        sg.grad(sg.sum(sg.abs(x * sg.constant(np.array([2 - 1j, 1j])))), [x])
    xe = eager.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(sg.GradError, match="complex value at (abs|mul)"):
        sg.sum(sg.abs(xe * np.array([2 - 1j, 1j]))).backward()
    # complex values still flow forward
    z = sg.placeholder((2,), dtype="complex128", name="z")
    np.testing.assert_array_equal(sg.compile(sg.abs(z * 2.0), inputs=[z])(np.array([3 + 4j, 1j])), [10.0, 2.0])
