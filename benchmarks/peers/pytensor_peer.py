"""pytensor.function versions of the workloads, in pytensor's default mode (numba in PyTensor 3)."""
from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt

from ..workloads import (
    A_PARAM_NAMES,
    B_LR,
    B_PARAM_NAMES,
    CHAIN_SCALE,
    RNN_PARAM_NAMES,
    Prepared,
    Stopwatch,
    sgd_step_check,
)


def versions():
    mode = pytensor.compile.mode.get_default_mode()
    return {"pytensor": pytensor.__version__, "mode": str(pytensor.config.mode),
            "linker": type(mode.linker).__name__}


def _rnn_loss(X, Wx, Wh, b):
    """R1/R2 with pytensor.scan, as its users write an RNN: the step's function, the sequence, the initial
    state, the weights as non-sequences."""
    def step(x, h, Wx, Wh, b):
        return pt.tanh(x @ Wx + h @ Wh + b)
    h0 = pt.zeros((X.shape[1], Wh.shape[0]), dtype="float64")
    hs = pytensor.scan(step, sequences=X, outputs_info=h0, non_sequences=[Wx, Wh, b], return_updates=False)
    return 0.5 * pt.mean(hs * hs)


def prepare(workload, data) -> Prepared:
    kind = workload.kind
    sw = Stopwatch()
    updates = None
    if kind == "mlp_small":
        params = [pytensor.shared(data[k].copy(), name=k) for k in A_PARAM_NAMES]
        W, b1, U, d, v, b = params
        X, y = pt.dmatrix("X"), pt.dvector("y")
        h = pt.sigmoid(X @ W.T + b1)
        g = pt.sigmoid(h @ U.T + d)
        err = g @ v + b - y
        loss = pt.mean(err * err)
        inputs, feeds = [X, y], (data["X"], data["y"])
    elif kind == "mlp_sgd":
        params = [pytensor.shared(data[k].copy(), name=k) for k in B_PARAM_NAMES]
        W1, b1, W2, b2, W3, b3 = params
        X, t = pt.fmatrix("X"), pt.lvector("t")
        a1 = pt.maximum(X @ W1 + b1, 0)
        a2 = pt.maximum(a1 @ W2 + b2, 0)
        logp = pt.special.log_softmax(a2 @ W3 + b3, axis=-1)
        loss = -pt.mean(logp[pt.arange(t.shape[0]), t])
        inputs, feeds = [X, t], (data["X"], data["t"])
    elif kind == "chain":
        x = pt.dvector("x")
        h = x
        for _ in range(workload.cycles):
            h = pt.tanh(pt.sin(h) * CHAIN_SCALE + x)
        loss = pt.sum(h)
        params, inputs, feeds = [x], [x], (data["x"],)
    elif kind == "empty":
        x = pt.dvector("x")
        loss, params, inputs, feeds = x + 1.0, [], [x], (data["x"],)
    elif kind == "rnn":
        params = [pytensor.shared(data[k].copy(), name=k) for k in RNN_PARAM_NAMES]
        X = pt.dtensor3("X")
        loss = _rnn_loss(X, *params)
        inputs, feeds = [X], (data["X"],)
    else:
        raise ValueError(f"unknown workload kind {kind!r}")
    sw.lap("build")
    grads = pytensor.grad(loss, params) if params else []
    sw.lap("grad")
    if kind == "mlp_sgd":
        lr = np.float32(B_LR)
        updates = [(p, p - lr * g) for p, g in zip(params, grads)]
        fn = pytensor.function(inputs, loss, updates=updates)
    elif kind == "empty":
        fn = pytensor.function(inputs, loss)
    else:
        fn = pytensor.function(inputs, [loss] + grads)
    sw.lap("compile")

    def call():
        return fn(*feeds)

    if kind == "mlp_sgd":
        def put(values):
            for p, v in zip(params, values):
                p.set_value(v)

        def check():
            return sgd_step_check(data, call, lambda: [p.get_value() for p in params], put)
    elif kind == "empty":
        def check():
            return [call()]
    else:
        def check():
            return list(call())

    sw.skip()
    call()
    sw.lap("first_call")
    return Prepared("pytensor", call, check, sw)
