"""Hand-written numpy backprop: the baseline every ratio is measured against.

This is what a careful person writes in an afternoon: plain numpy, the reverse sweep worked out by
hand, a Python loop for the chains, fresh arrays everywhere (no ``out=``, no buffer reuse, no fusion).
It must not get cleverer than that, or the ratios stop meaning what the README says they mean.
"""
from __future__ import annotations

import functools

import numpy as np

from .workloads import A_PARAM_NAMES, B_LR, B_PARAM_NAMES, CHAIN_SCALE, RNN_PARAM_NAMES, Prepared, sgd_step_check


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
    raise ValueError(f"unknown workload kind {kind!r}")
