"""Hand-written numpy backprop: the baseline every ratio is measured against.

This is what a careful person writes in an afternoon: plain numpy, the reverse sweep worked out by
hand, a Python loop for the chains, fresh arrays everywhere (no ``out=``, no buffer reuse, no fusion).
It must not get cleverer than that, or the ratios stop meaning what the README says they mean.
"""
from __future__ import annotations

import functools

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .workloads import (
    A_PARAM_NAMES,
    B_LR,
    B_PARAM_NAMES,
    CHAIN_SCALE,
    CNN_PARAM_NAMES,
    RNN_PARAM_NAMES,
    Prepared,
    sgd_step_check,
)


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def mlp_small(X, y, W, b1, U, d, v, b):
    """Workload A: loss and the gradients of W, b1, U, d, v, b (the 20 parameters)."""
    h = sigmoid(X @ W.T + b1)
    g = sigmoid(h @ U.T + d)
    err = g @ v + b - y
    loss = np.mean(err * err)
    dyhat = 2.0 * err / len(y)
    gv = g.T @ dyhat
    gb = np.sum(dyhat)
    dz2 = np.outer(dyhat, v) * g * (1.0 - g)
    gU = dz2.T @ h
    gd = np.sum(dz2, axis=0)
    dz1 = (dz2 @ U) * h * (1.0 - h)
    gW = dz1.T @ X
    gb1 = np.sum(dz1, axis=0)
    return loss, gW, gb1, gU, gd, gv, gb


def mlp_sgd_step(params, X, t, lr=B_LR):
    """Workload B: one SGD step of the ReLU MLP on (X, t); updates ``params`` (a dict) in place."""
    W1, b1, W2, b2, W3, b3 = (params[k] for k in B_PARAM_NAMES)
    n = X.shape[0]
    z1 = X @ W1 + b1
    a1 = np.maximum(z1, 0)
    z2 = a1 @ W2 + b2
    a2 = np.maximum(z2, 0)
    z3 = a2 @ W3 + b3
    shifted = z3 - np.max(z3, axis=1, keepdims=True)
    e = np.exp(shifted)
    total = np.sum(e, axis=1, keepdims=True)
    rows = np.arange(n)
    loss = np.mean(np.log(total[:, 0]) - shifted[rows, t])
    dz3 = e / total
    dz3[rows, t] -= 1
    dz3 /= n
    gW3 = a2.T @ dz3
    gb3 = np.sum(dz3, axis=0)
    dz2 = (dz3 @ W3.T) * (z2 > 0)
    gW2 = a1.T @ dz2
    gb2 = np.sum(dz2, axis=0)
    dz1 = (dz2 @ W2.T) * (z1 > 0)
    gW1 = X.T @ dz1
    gb1 = np.sum(dz1, axis=0)
    for key, grad in zip(B_PARAM_NAMES, (gW1, gb1, gW2, gb2, gW3, gb3)):
        params[key] -= lr * grad
    return loss


def chain_grad(x, cycles, scale=CHAIN_SCALE):
    """Workloads C and D: sum(h) and its gradient w.r.t. x, where each cycle is h = tanh(sin(h)*scale + x)."""
    saved = []
    h = x
    for _ in range(cycles):
        s = np.sin(h)
        m = s * scale
        a = m + x
        out = np.tanh(a)
        saved.append((h, out))
        h = out
    loss = np.sum(h)
    g = np.ones_like(x)
    gx = np.zeros_like(x)
    for h_in, h_out in reversed(saved):
        g = g * (1.0 - h_out * h_out)
        gx = gx + g
        g = g * scale
        g = g * np.cos(h_in)
    gx = gx + g
    return loss, gx


def rnn_grad(X, Wx, Wh, b):
    """Workloads R1 and R2: loss 0.5 * mean(h_t**2) of the tanh RNN and the gradients of Wx, Wh and b.

    Back-propagation through time as a careful person writes it: the input projection of all steps is
    one matmul before the loop, every h is kept in one (steps, batch, hidden) array, the reverse loop
    does only what must be sequential (one matmul per step), and the weight gradients are each one
    matmul over all steps after it.
    """
    steps, batch, inputs = X.shape
    hidden = Wh.shape[0]
    P = (X.reshape(steps * batch, inputs) @ Wx).reshape(steps, batch, hidden) + b
    hs = np.empty((steps, batch, hidden))
    h = np.zeros((batch, hidden))
    for t in range(steps):
        h = np.tanh(P[t] + h @ Wh)
        hs[t] = h
    loss = 0.5 * np.mean(hs * hs)
    scale = 1.0 / hs.size                       # d loss / d h_t = h_t * scale, at every step
    dA = np.empty_like(hs)                      # d loss / d (pre-activation) at every step
    dh = np.zeros((batch, hidden))              # what flows back into h_t from step t + 1
    for t in range(steps - 1, -1, -1):
        h = hs[t]
        da = (h * scale + dh) * (1.0 - h * h)
        dA[t] = da
        if t:                                   # h_0 is the constant zero: nothing to send it
            dh = da @ Wh.T
    flat = dA.reshape(steps * batch, hidden)
    gWx = X.reshape(steps * batch, inputs).T @ flat
    gWh = hs[:-1].reshape(-1, hidden).T @ dA[1:].reshape(-1, hidden)   # step 0 read h_0 = 0
    gb = flat.sum(axis=0)
    return loss, gWx, gWh, gb


def im2col(x):
    """The 3x3 windows of ``x`` (N, C, H, W) padded by 1, as a (C*9, N*H*W) matrix: row (c, i, j) holds
    input channel c shifted by kernel offset (i, j) at every output pixel. One copy of a strided view."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    sn, sc, sh, sw = xp.strides
    windows = as_strided(xp, (c, 3, 3, n, h, w), (sc, sh, sw, sn, sh, sw), writeable=False)
    return windows.reshape(c * 9, n * h * w)


def col2im(cols, shape):
    """im2col's adjoint: each kernel offset's rows added into its shifted window of the padded input
    (nine strided adds), the padding cut off; returns (N, C, H, W) for an input of ``shape``."""
    n, c, h, w = shape
    d = cols.reshape(c, 3, 3, n, h, w)
    dxp = np.zeros((c, n, h + 2, w + 2), cols.dtype)
    for i in range(3):
        for j in range(3):
            dxp[:, :, i:i + h, j:j + w] += d[:, i, j]
    return dxp[:, :, 1:-1, 1:-1].transpose(1, 0, 2, 3)


def conv3x3(x, w, b):
    """Convolution 3x3, padding 1, NCHW, w (O, C, 3, 3): (output (N, O, H, W), the im2col columns)."""
    n, _, h, wd = x.shape
    cols = im2col(x)
    out = w.reshape(w.shape[0], -1) @ cols + b[:, None]          # (O, N*H*W): one GEMM
    return out.reshape(-1, n, h, wd).transpose(1, 0, 2, 3), cols


def conv3x3_backward(dout, w, cols, x_shape=None):
    """(gradient of w, of b, of the input when ``x_shape`` is given) from dout (N, O, H, W)."""
    d = dout.transpose(1, 0, 2, 3).reshape(w.shape[0], -1)      # (O, N*H*W), the GEMMs' layout
    gw = (d @ cols.T).reshape(w.shape)
    gb = d.sum(axis=1)
    dx = col2im(w.reshape(w.shape[0], -1).T @ d, x_shape) if x_shape is not None else None
    return gw, gb, dx


def max_pool2(x):
    """2x2 max pooling, stride 2: (output, one mask per window corner, (0, 0) (0, 1) (1, 0) (1, 1), marking
    where the window's first maximum is, row by row, as torch's rule has it)."""
    n, c, h, w = x.shape
    r = x.reshape(n, c, h // 2, 2, w // 2, 2)
    corners = [r[:, :, :, i, :, j] for i in (0, 1) for j in (0, 1)]
    out = np.maximum(np.maximum(corners[0], corners[1]), np.maximum(corners[2], corners[3]))
    taken = np.zeros(out.shape, bool)
    masks = []
    for corner in corners:
        first = (corner == out) & ~taken
        taken |= first
        masks.append(first)
    return out, masks


def max_pool2_backward(dout, masks):
    """Each window's gradient to its first maximum, the other three corners get zero."""
    n, c, h, w = dout.shape
    dx = np.empty((n, c, h, 2, w, 2), dout.dtype)
    for (i, j), mask in zip(((0, 0), (0, 1), (1, 0), (1, 1)), masks):
        dx[:, :, :, i, :, j] = dout * mask
    return dx.reshape(n, c, 2 * h, 2 * w)


def softmax_cross_entropy(z, t):
    """(mean cross-entropy of the logits z against the labels t, its gradient with respect to z)."""
    n = z.shape[0]
    shifted = z - np.max(z, axis=1, keepdims=True)
    e = np.exp(shifted)
    total = np.sum(e, axis=1, keepdims=True)
    rows = np.arange(n)
    loss = np.mean(np.log(total[:, 0]) - shifted[rows, t])
    dz = e / total
    dz[rows, t] -= 1
    dz /= n
    return loss, dz


def cnn_grad(X, t, w1, b1, w2, b2, w3, b3):
    """Workload V1: the loss of the LeNet-style net and the gradients of its 6 parameter arrays."""
    n = X.shape[0]
    z1, cols1 = conv3x3(X, w1, b1)
    p1, first1 = max_pool2(np.maximum(z1, 0))
    z2, cols2 = conv3x3(p1, w2, b2)
    p2, first2 = max_pool2(np.maximum(z2, 0))
    flat = p2.reshape(n, -1)                     # NCHW order: channel, row, column
    loss, dz3 = softmax_cross_entropy(flat @ w3 + b3, t)
    gw3 = flat.T @ dz3
    gb3 = dz3.sum(axis=0)
    dp2 = (dz3 @ w3.T).reshape(p2.shape)
    dz2 = max_pool2_backward(dp2, first2) * (z2 > 0)
    gw2, gb2, dp1 = conv3x3_backward(dz2, w2, cols2, p1.shape)
    dz1 = max_pool2_backward(dp1, first1) * (z1 > 0)
    gw1, gb1, _ = conv3x3_backward(dz1, w1, cols1)          # the images need no gradient
    return loss, gw1, gb1, gw2, gb2, gw3, gb3


def add_one(x):
    """Workload E: the nearly empty function."""
    return x + 1.0


def prepare(workload, data) -> Prepared:
    kind = workload.kind
    if kind == "mlp_small":
        fn = functools.partial(mlp_small, data["X"], data["y"], *(data[k] for k in A_PARAM_NAMES))
        return Prepared("numpy", fn, lambda: list(fn()))
    if kind == "mlp_sgd":
        state = {k: data[k].copy() for k in B_PARAM_NAMES}
        step = functools.partial(mlp_sgd_step, state, data["X"], data["t"])

        def check():
            return sgd_step_check(data, step, lambda: [state[k] for k in B_PARAM_NAMES],
                                  lambda values: state.update(zip(B_PARAM_NAMES, values)))
        return Prepared("numpy", step, check)
    if kind == "chain":
        fn = functools.partial(chain_grad, data["x"], workload.cycles)
        return Prepared("numpy", fn, lambda: list(fn()))
    if kind == "empty":
        fn = functools.partial(add_one, data["x"])
        return Prepared("numpy", fn, lambda: [fn()])
    if kind == "rnn":
        fn = functools.partial(rnn_grad, data["X"], *(data[k] for k in RNN_PARAM_NAMES))
        return Prepared("numpy", fn, lambda: list(fn()), traced=True)
    if kind == "cnn":
        fn = functools.partial(cnn_grad, data["X"], data["t"], *(data[k] for k in CNN_PARAM_NAMES))
        return Prepared("numpy", fn, lambda: list(fn()))
    raise ValueError(f"unknown workload kind {kind!r}")
