"""The four built-in workloads of the study (examples/static_vs_dynamic.py, ``staticgrad bench --study``).

Each model is written once with staticgrad functions, so it runs unchanged on placeholders and on eager tensors.
The sigmoid network is worked example 3; :func:`sigmoid_net_graph` builds it for the tests, the pictures in
docs/ and the benchmark, so they all check one network.
"""
from __future__ import annotations

import numpy as np

from .. import ops
from ..tensor import name_scope, parameter, placeholder

# The 2-3-2-1 sigmoid network of docs/worked_examples.md example 3. W and U hold one unit's weights per row, as
# the document writes W x, so the layers multiply by their transposes.
SIGMOID_NET_NAMES = ("W", "b1", "U", "d", "v", "b")
SIGMOID_NET_PARAMS = [np.array([[.3, .6], [.4, .7], [.8, .1]]), np.array([.2, .5, .9]),
                      np.array([[.7, .2, .8], [.5, .4, .9]]), np.array([.2, .5]), np.array([.6, .8]),
                      np.array(.3)]
SIGMOID_NET_BATCH = (np.array([[3.0, 2.0], [0.5, 1.2]]), np.array([1.5, 0.9]))
# One name scope a layer, holding its parameters too, so collapsed pictures show a layer as one box.
_SIGMOID_NET_SCOPES = (("layer1", ("W", "b1")), ("layer2", ("U", "d")), ("output", ("v", "b")))


def sigmoid_net_parts(x, y, W, b1, U, d, v, b):
    """The network's tensors by name: h, z (the second layer's pre-activations), g, yhat, err and loss,
    the mean squared error. Tests and pictures point at the intermediates; err * err (not err ** 2) is what
    the benchmark's peers and hand-written reference compute."""
    with name_scope("layer1"):
        h = ops.sigmoid(x @ W.T + b1)
    with name_scope("layer2"):
        z = h @ U.T + d
        g = ops.sigmoid(z)
    with name_scope("output"):
        yhat = g @ v + b
    err = yhat - y
    return {"h": h, "z": z, "g": g, "yhat": yhat, "err": err, "loss": ops.mean(err * err)}


def sigmoid_net(x, y, W, b1, U, d, v, b):
    """The 2-3-2-1 sigmoid network of the worked examples (20 parameters), mean squared error."""
    return sigmoid_net_parts(x, y, W, b1, U, d, v, b)["loss"]


def sigmoid_net_graph(params=None):
    """The network as a graph to grad and compile: placeholders x (None, 2) and y (None,), parameters W, b1,
    U, d, v, b holding copies of ``params`` (default SIGMOID_NET_PARAMS), each in its layer's name scope,
    and the tensors of :func:`sigmoid_net_parts` (the loss named L); all in one dict, the parameters also as
    the list "params"."""
    values = dict(zip(SIGMOID_NET_NAMES, SIGMOID_NET_PARAMS if params is None else params))
    net = {"x": placeholder((None, 2), name="x"), "y": placeholder((None,), name="y")}
    for scope, names in _SIGMOID_NET_SCOPES:
        with name_scope(scope):
            net.update((k, parameter(values[k], name=k)) for k in names)
    net["params"] = [net[k] for k in SIGMOID_NET_NAMES]
    net.update(sigmoid_net_parts(net["x"], net["y"], *net["params"]))
    net["loss"].name = "L"          # as docs/worked_examples.md calls it; pictures label gradients dL/dW
    return net


def mlp_tanh_logistic(x, t, W1, b1, W2, b2, W3, b3):
    """The moons MLP: two tanh layers, binary cross-entropy on logits (softplus(z) - t z)."""
    h = ops.tanh(x @ W1 + b1)
    h = ops.tanh(h @ W2 + b2)
    z = ops.reshape(h @ W3 + b3, (-1,))
    return ops.mean(ops.softplus(z) - t * z)


def mlp_relu_softmax(x, t, *params):
    """A relu MLP of any depth with softmax cross-entropy on integer labels."""
    h = x
    for k in range(0, len(params) - 2, 2):
        h = ops.relu(h @ params[k] + params[k + 1])
    return ops.softmax_cross_entropy(h @ params[-2] + params[-1], t)


def deep_chain(x, y, *params):
    """Many small tanh layers: per-op overhead dominates, the case a compiler helps most."""
    h = x
    for k in range(0, len(params), 2):
        h = ops.tanh(h @ params[k] + params[k + 1])
    return ops.mean(ops.square(h - y))


def _layers(sizes, rng, scale=1.0):
    out = []
    for m, n in zip(sizes[:-1], sizes[1:]):
        out += [rng.normal(scale=scale * np.sqrt(1.0 / m), size=(m, n)), np.zeros(n)]
    return out


def workloads(quick=False, seed=0):
    """The four workloads of the study as dicts (name, model, params, batches, lr); ``quick`` makes
    them small enough for tests."""
    from ..data import make_moons
    rng = np.random.default_rng(seed)
    n = 8 if quick else 1
    out = [{"name": "sigmoid 2-3-2-1 (20 params)", "model": sigmoid_net, "params": SIGMOID_NET_PARAMS,
            "batches": [SIGMOID_NET_BATCH] * (300 // n), "lr": 0.1}]

    X, y = make_moons(512, noise=0.15, seed=seed)
    idx = [rng.permutation(512)[:64] for _ in range(300 // n)]
    out.append({"name": "moons MLP 2-8-8-1", "model": mlp_tanh_logistic,
                "params": _layers([2, 8, 8, 1], rng), "batches": [(X[i], y[i]) for i in idx], "lr": 0.5})

    sizes = [784, 256, 256, 10] if not quick else [784, 32, 32, 10]
    data = [(rng.normal(size=(64, 784)), rng.integers(0, 10, 64)) for _ in range(40 // n * 2 if quick else 40)]
    out.append({"name": f"MLP {'-'.join(map(str, sizes))} (batch 64)", "model": mlp_relu_softmax,
                "params": _layers(sizes, rng, np.sqrt(2.0)), "batches": data, "lr": 0.01})

    depth, width = (50, 4) if not quick else (10, 4)
    chain = [(rng.normal(size=(16, width)), rng.normal(size=(16, width)) * 0.5) for _ in range(200 // n)]
    out.append({"name": f"deep narrow chain ({depth} x tanh({width}x{width}))", "model": deep_chain,
                "params": _layers([width] * (depth + 1), rng), "batches": chain, "lr": 0.05})
    return out
