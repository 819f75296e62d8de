"""Generated source: paired kernels (one pass for a loss and its gradient)."""
import numpy as np

import staticgrad as sg
from staticgrad.ops import nn as nn_ops


def _step(batch=None):
    rng = np.random.default_rng(0)
    x = sg.placeholder((batch, 4), name="x")
    t = sg.placeholder((batch,), dtype="int64", name="t")
    W = sg.parameter(rng.standard_normal((4, 3)), name="W")
    loss = sg.softmax_cross_entropy(x @ W, t)
    (g,) = sg.grad(loss, [W])
    return x, t, W, loss, g


def test_loss_and_gradient_share_one_pass():
    x, t, W, loss, g = _step()
    fn = sg.compile([loss, g], inputs=[x, t])
    assert "one pass with" in fn.source
    assert fn.source.count("softmax_cross_entropy_grad") == 1       # only in the pair line's comment
    rng = np.random.default_rng(1)
    X, T = rng.standard_normal((5, 4)), rng.integers(0, 3, 5)
    got_loss, got_g = fn(X, T)
    z = X @ W.value
    assert got_loss == nn_ops._sce_kernel(z, T)                      # the same bits as the lone kernels
    np.testing.assert_array_equal(got_g, X.T @ nn_ops._sce_grad_kernel(z, T))


def test_pair_kernel_matches_each_kernel_bit_for_bit():
    rng = np.random.default_rng(2)
    for dtype in (np.float32, np.float64):
        z = (rng.standard_normal((7, 5)) * 30).astype(dtype)
        t = rng.integers(0, 5, 7)
        loss, grad = nn_ops._sce_pair_kernel(z, t)
        assert loss == nn_ops._sce_kernel(z, t) and loss.dtype == dtype
        np.testing.assert_array_equal(grad, nn_ops._sce_grad_kernel(z, t))


def test_loss_alone_is_not_paired():
    x, t, W, loss, g = _step()
    assert "one pass" not in sg.compile(loss, inputs=[x, t]).source


def test_empty_batch_loss_is_nan_and_gradient_empty():
    x, t, W, loss, g = _step(batch=None)
    fn = sg.compile([loss, g], inputs=[x, t])
    got_loss, got_g = fn(np.zeros((0, 4)), np.zeros(0, dtype=np.int64))
    assert np.isnan(got_loss)
    np.testing.assert_array_equal(got_g, np.zeros((4, 3)))


def _bound(fn, kernel):
    return [name for name, value in fn.program.namespace.items() if value is kernel]


def _bits(a):
    return np.ascontiguousarray(a).view(f"i{a.dtype.itemsize}")


def _relu_gradient(zero):
    """where(relu(z) > 0, y, zero) * 2 for z = x @ W, with y fed: the ReLU gradient's shape in a plan."""
    x = sg.placeholder((None, 6), name="x")
    y = sg.placeholder((None, 5), name="y")
    W = sg.parameter(np.random.default_rng(2).standard_normal((6, 5)), name="W")
    a = sg.relu(x @ W)
    masked = sg.where(a > 0, y * 1.5, zero)
    return sg.compile(masked * 2.0, inputs=[x, y]), W


def test_where_with_a_plus_zero_in_workspace_buffers_skips_the_general_kernel():
    from staticgrad.ops.elementwise import where_else_zero
    rng = np.random.default_rng(3)
    X, Y = rng.standard_normal((40, 6)), rng.standard_normal((40, 5))
    Y[::3, 0], Y[1::3, 1], Y[2::3, 2], Y[::2, 3] = -0.0, np.nan, -np.inf, 0.0
    for zero, specialized in ((0.0, True), (-0.0, False)):
        fn, W = _relu_gradient(zero)
        got = fn(X, Y)
        assert bool(_bound(fn, where_else_zero)) == specialized, fn.source
        want = np.where(np.maximum(X @ W.value, 0) > 0, Y * 1.5, zero) * 2.0
        np.testing.assert_array_equal(_bits(got), _bits(want))      # signed zeros and nans included


def test_a_relu_gradient_in_long_double_takes_numpys_where():
    # No integer dtype carries a long double's bits: neither the plan nor the kernel may try.
    x = sg.placeholder((None, 300), dtype="longdouble", name="x", requires_grad=True)
    y = sg.placeholder((None, 300), dtype="longdouble", name="y")
    (g,) = sg.grad(sg.sum(sg.relu(x * 2.0) * y), [x])
    fn = sg.compile(g * 3.0, inputs=[x, y])
    X = np.linspace(-1, 1, 1200, dtype=np.longdouble).reshape(4, 300)
    Y = np.full((4, 300), 0.5, np.longdouble)
    got = fn(X, Y)
    assert got.dtype == np.longdouble
    np.testing.assert_array_equal(got, np.where(X * 2.0 > 0, Y * 2.0, 0.0) * 3.0)


def test_a_batched_scalar_as_wheres_else_value_is_read_at_run_time():
    # Batching turns each batched result into a "constant" row of its stacked buffer: zeros when the plan
    # is built, the real value at run time. It must not pass for where's fixed +0.0.
    from staticgrad.ops.elementwise import where_else_zero
    s = [sg.placeholder((), name=f"s{i}") for i in range(4)]
    v = sg.placeholder((300,), name="v")
    a = [sg.exp(si) for si in s]
    k = sg.exp(a[0] + a[1] + a[2] + a[3])
    outs = [sg.sum(sg.where(v > 0, v * float(i + 2), ai * k) * 1.0) for i, ai in enumerate(a)]
    fn = sg.compile(outs, inputs=s + [v])
    S, V = [-0.3 * (i + 1) for i in range(4)], np.linspace(-1, 1, 300)
    got = fn(*S, V)
    assert fn.report().summary["batched_groups"] >= 1
    assert not _bound(fn, where_else_zero)
    A = np.exp(S)
    K = np.exp(A[0] + A[1] + A[2] + A[3])
    for i, g in enumerate(got):
        np.testing.assert_allclose(g, np.sum(np.where(V > 0, V * (i + 2), A[i] * K)), rtol=1e-12)


def test_where_with_a_complex_else_value():
    x = sg.placeholder((None, 4), dtype=np.complex128, name="x")
    X = np.arange(8).reshape(2, 4) * (1 + 1j) * 0.5
    for y in (0j, 1j, np.complex128(0)):
        fn = sg.compile(sg.where(sg.abs(x) > 1.0, x * 2.0, sg.constant(y)) * 3.0, inputs=[x])
        np.testing.assert_array_equal(fn(X), np.where(np.abs(X) > 1, X * 2, y) * 3)


def test_an_output_is_copied_only_where_the_caller_would_share_it():
    # a fresh result is the caller's own; a feed, or a value already returned, is copied
    x = sg.placeholder((3,), name="x")
    y = sg.exp(x)
    fn = sg.compile([y, x, y], inputs=[x])
    fn.backend = fn.backend.replace(scalar=False)
    X = np.array([0.0, 1.0, 2.0])
    a, b, c = fn(X)
    assert not np.shares_memory(a, c) and not np.shares_memory(b, X)
    (ret,) = [line.strip() for line in fn.source.splitlines() if line.strip().startswith("return")]
    assert ret.count("np.array(") == 2, ret

