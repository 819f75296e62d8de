"""A small tanh RNN written with sg.scan, its weight gradients, and the same loop written in numpy."""
import numpy as np

import staticgrad as sg


def rnn(T=5, B=2, D=3, H=4, seed=0):
    """{"X", "weights" (Wx, Wh, b), "loss", "grads", "hs", "fn" (compiled: loss and grads), "x" (a feed)}:
    h_t = tanh(x_t Wx + h_{t-1} Wh + b) from h_0 = 0, loss = 0.5 mean(h²) over every step."""
    rng = np.random.default_rng(seed)
    X = sg.placeholder((T, B, D), name="X")
    Wx = sg.parameter(rng.normal(size=(D, H)) * 0.5, name="Wx")
    Wh = sg.parameter(rng.normal(size=(H, H)) * 0.5, name="Wh")
    b = sg.parameter(rng.normal(size=H) * 0.1, name="b")

    def step(h, x):
        h = sg.tanh(x @ Wx + h @ Wh + b)
        h.name = "h"
        return h, h
    _, hs = sg.scan(step, sg.constant(np.zeros((B, H)), name="h0"), xs=X)
    loss = 0.5 * sg.mean(hs * hs)
    loss.name = "loss"
    grads = sg.grad(loss, [Wx, Wh, b])
    fn = sg.compile([loss] + grads, inputs=[X])
    return {"X": X, "weights": [Wx, Wh, b], "loss": loss, "grads": grads, "hs": hs, "fn": fn,
            "x": rng.normal(size=(T, B, D))}


def numpy_rnn(x, Wx, Wh, b):
    """(h_t per step, [(dh carried into step t's VJP, running dWx, dWh, db after it)] in the order the
    reverse loop runs, loss) by hand."""
    T, B, _ = x.shape
    H = Wh.shape[0]
    hs, h = [], np.zeros((B, H))
    for t in range(T):
        h = np.tanh(x[t] @ Wx + h @ Wh + b)
        hs.append(h)
    N = T * B * H
    loss = 0.5 * sum(float((v * v).sum()) for v in hs) / N
    dh, dWx, dWh, db = np.zeros((B, H)), np.zeros_like(Wx), np.zeros_like(Wh), np.zeros_like(b)
    backward = []
    for t in reversed(range(T)):
        da = (dh + hs[t] / N) * (1 - hs[t] ** 2)
        prev = hs[t - 1] if t else np.zeros((B, H))
        dWx, dWh, db = dWx + x[t].T @ da, dWh + prev.T @ da, db + da.sum(0)
        dh = da @ Wh.T
        backward.append((dh, dWx, dWh, db))
    return hs, backward, loss
