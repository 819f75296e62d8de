"""The first thing to run: a 2-8-8-1 MLP learns two moons, compiled once, run batch after batch."""
from __future__ import annotations

import os

import numpy as np

from . import ops
from .autodiff import grad
from .compiler import compile
from .dot import save_dot
from .tensor import parameter, placeholder


def make_moons(n, noise=0.1, seed=0):
    """Two interleaving half circles (the classic toy set), generated with numpy."""
    rng = np.random.default_rng(seed)
    half = n // 2
    t_top, t_bottom = rng.uniform(0, np.pi, half), rng.uniform(0, np.pi, n - half)
    top = np.stack([np.cos(t_top), np.sin(t_top)], axis=1)
    bottom = np.stack([1 - np.cos(t_bottom), 0.5 - np.sin(t_bottom)], axis=1)
    X = np.concatenate([top, bottom]) + rng.normal(scale=noise, size=(n, 2))
    y = np.concatenate([np.zeros(half), np.ones(n - half)])
    order = rng.permutation(n)
    return X[order], y[order]


def build_mlp(sizes, seed=0):
    rng = np.random.default_rng(seed)
    params = []
    for k, (m, n) in enumerate(zip(sizes[:-1], sizes[1:]), 1):
        W = parameter(rng.normal(scale=np.sqrt(2.0 / m), size=(m, n)), name=f"W{k}")
        b = parameter(np.zeros(n), name=f"b{k}")
        params += [W, b]
    return params


def forward(x, params):
    h = x
    pairs = list(zip(params[::2], params[1::2]))
    for k, (W, b) in enumerate(pairs):
        h = h @ W + b
        if k < len(pairs) - 1:
            h = ops.tanh(h)
    return h


def run(out_dir="staticgrad-demo", epochs=300, lr=0.5, batch=64, seed=0, log=print):
    X, y = make_moons(512, noise=0.15, seed=seed)
    X_test, y_test = make_moons(256, noise=0.15, seed=seed + 1)
    x = placeholder((None, 2), name="x")
    t = placeholder((None,), name="t")
    params = build_mlp([2, 8, 8, 1], seed)
    logits = ops.reshape(forward(x, params), (-1,))
    # Binary cross-entropy with logits, written stably: softplus(z) - t*z.
    loss = ops.mean(ops.softplus(logits) - t * logits)
    grads = grad(loss, params)
    step = compile(loss, inputs=[x, t], updates=[(p, p - lr * g) for p, g in zip(params, grads)])
    predict = compile(logits, inputs=[x])
    log(f"compiled a training step of {len(step.ir.nodes)} nodes "
        f"({sum(1 for n in step.ir.nodes.values() if n.role == 'backward')} backward)")
    rng = np.random.default_rng(seed)
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(X))
        losses = [step(X[idx], y[idx]) for idx in np.array_split(order, len(X) // batch)]
        if epoch == 1 or epoch % 50 == 0:
            acc = np.mean((predict(X_test) > 0) == y_test)
            log(f"epoch {epoch:4d}  loss {np.mean(losses):.4f}  test accuracy {acc:.3f}")
    acc = float(np.mean((predict(X_test) > 0) == y_test))
    os.makedirs(out_dir, exist_ok=True)
    path = save_dot(step, os.path.join(out_dir, "moons_step.dot"))
    log(f"final test accuracy {acc:.3f}; forward+backward graph written to {path}")
    return acc
