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
