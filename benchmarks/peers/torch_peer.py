"""PyTorch (eager, and torch.compile) versions of the workloads, written the way its users write them."""
from __future__ import annotations

import torch

from ..workloads import (
    A_PARAM_NAMES,
    B_LR,
    B_PARAM_NAMES,
    CHAIN_SCALE,
    CNN_PARAM_NAMES,
    RNN_PARAM_NAMES,
    Prepared,
    Stopwatch,
    sgd_step_check,
)


def versions():
    return {"torch": torch.__version__, "torch_threads": torch.get_num_threads()}


def _forward_a(X, y, W, b1, U, d, v, b):
    h = torch.sigmoid(X @ W.T + b1)
    g = torch.sigmoid(h @ U.T + d)
    err = g @ v + b - y
    return torch.mean(err * err)


def _forward_b(X, t, W1, b1, W2, b2, W3, b3):
    a1 = torch.relu(X @ W1 + b1)
    a2 = torch.relu(a1 @ W2 + b2)
    return torch.nn.functional.cross_entropy(a2 @ W3 + b3, t)


def _forward_chain(x, cycles):
    h = x
    for _ in range(cycles):
        h = torch.tanh(torch.sin(h) * CHAIN_SCALE + x)
    return torch.sum(h)


def _forward_rnn(X, Wx, Wh, b):
    """R1/R2 as torch users write an RNN by hand: a Python loop over the steps, autograd records it."""
    h = X.new_zeros((X.shape[1], Wh.shape[0]))
    hs = []
    for x in X:
        h = torch.tanh(x @ Wx + h @ Wh + b)
        hs.append(h)
    hs = torch.stack(hs)
    return 0.5 * torch.mean(hs * hs)


def _forward_cnn(X, t, w1, b1, w2, b2, w3, b3):
    """V1 with torch.nn.functional, as its users write a small convolutional net."""
    F = torch.nn.functional
    a = F.max_pool2d(F.relu(F.conv2d(X, w1, b1, padding=1)), 2)
    a = F.max_pool2d(F.relu(F.conv2d(a, w2, b2, padding=1)), 2)
    return F.cross_entropy(a.reshape(a.shape[0], -1) @ w3 + b3, t)


def _add_one(x):
    return x + 1.0


def _np(values):
    return [v.detach().numpy() for v in values]


def prepare(workload, data, compiled=False) -> Prepared:
    """Eager torch, or with ``compiled`` the forward wrapped in torch.compile (AOTAutograd compiles the
    backward at the first call; the one-time cost is therefore all in ``first_call``)."""
    impl = "torch.compile" if compiled else "torch"
    kind = workload.kind
    sw = Stopwatch()
    if kind == "mlp_small":
        forward = _forward_a
        params = [torch.tensor(data[k], requires_grad=True) for k in A_PARAM_NAMES]
        feeds = (torch.from_numpy(data["X"]), torch.from_numpy(data["y"]))
    elif kind == "mlp_sgd":
        forward = _forward_b
        params = [torch.tensor(data[k], requires_grad=True) for k in B_PARAM_NAMES]
        feeds = (torch.from_numpy(data["X"]), torch.from_numpy(data["t"]))
    elif kind == "chain":
        def forward(x):
            return _forward_chain(x, workload.cycles)
        params = [torch.tensor(data["x"], requires_grad=True)]
        feeds = ()
    elif kind == "empty":
        forward, params, feeds = _add_one, [], (torch.from_numpy(data["x"]),)
    elif kind == "rnn":
        forward = _forward_rnn
        params = [torch.tensor(data[k], requires_grad=True) for k in RNN_PARAM_NAMES]
        feeds = (torch.from_numpy(data["X"]),)
    elif kind == "cnn":
        forward = _forward_cnn
        params = [torch.tensor(data[k], requires_grad=True) for k in CNN_PARAM_NAMES]
        feeds = (torch.from_numpy(data["X"]), torch.from_numpy(data["t"]))
    else:
        raise ValueError(f"unknown workload kind {kind!r}")
    if compiled:
        forward = torch.compile(forward)
    sw.lap("build")

    if kind == "mlp_sgd":
        def call():
            loss = forward(*feeds, *params)
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p.sub_(B_LR * g)
            return loss
    elif kind == "empty":
        def call():
            with torch.no_grad():
                return forward(*feeds)
    else:
        def call():
            loss = forward(*feeds, *params)
            return (loss,) + torch.autograd.grad(loss, params)

    if kind == "mlp_sgd":
        def put(values):
            with torch.no_grad():
                for p, v in zip(params, values):
                    p.copy_(torch.from_numpy(v))

        def check():
            return sgd_step_check(data, lambda: call().detach().numpy(), lambda: _np(params), put)
    else:
        def check():
            out = call()
            return _np(out) if isinstance(out, tuple) else _np([out])

    sw.skip()
    call()
    sw.lap("first_call")
    notes = {"first_call_includes": "dynamo trace + inductor compile of forward and backward"} if compiled else {}
    return Prepared(impl, call, check, sw, notes)


def prepare_compiled(workload, data) -> Prepared:
    return prepare(workload, data, compiled=True)

