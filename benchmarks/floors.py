"""Where B, C and V1 stop: the share of the hand-written step taken by calls any numpy implementation makes too.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python -m benchmarks.floors [--only V1]

B: the eight matrix products of the SGD step alone (the shapes and operand layouts of benchmarks/reference.py,
float32), and the leanest whole step numpy allows (every result written with out=, parameters updated in
place, labels not checked): what no numpy program, generated or not, gets below. C: the 1,500 sin, cos and
tanh calls of the 2000-op chain alone, on the chain's own values, and the same with each sin and cos pair
taken from one complex exp (on the machines measured, numpy's complex exp has exactly the bits of its
sin and cos). V1 (benchmarks/cnn_floors.py): its 8 matrix products alone, its layout moves alone (im2col
copies, col2im adds, NCHW transposes), and the leanest whole step numpy allows. Each is
timed in interleaved rounds with the hand-written step and staticgrad's compiled step, one BLAS thread, CPU
time, medians (benchmarks/measure.py); what is printed is every median over the hand-written one.
"""
from __future__ import annotations

import os
import sys

import numpy as np

from . import cnn_floors, impl_staticgrad, reference, workloads
from .measure import time_interleaved


def _matmuls_of_b(data):
    rng = np.random.default_rng(0)
    f32 = np.float32
    X, W1, W2, W3 = data["X"], data["W1"], data["W2"], data["W3"]
    n, h = X.shape[0], W1.shape[1]
    a1, a2, dz1, dz2 = (rng.standard_normal((n, h)).astype(f32) for _ in range(4))
    dz3 = rng.standard_normal((n, W3.shape[1])).astype(f32)

    def products():
        X @ W1, a1 @ W2, a2 @ W3                        # forward
        a2.T @ dz3, dz3 @ W3.T, a1.T @ dz2, dz2 @ W2.T, X.T @ dz1     # backward
    return products


def lean_step_of_b(data, lr=workloads.B_LR):
    """(step, params): one SGD step of B in place on its own copies of the parameters, with the fewest
    numpy calls and no allocation but the loss's; the same arithmetic as the hand-written step."""
    f32, i32 = np.float32, np.int32
    params = {k: data[k].copy() for k in workloads.B_PARAM_NAMES}
    W1, b1, W2, b2, W3, b3 = params.values()
    X, t = data["X"], data["t"]
    n, h, k = X.shape[0], W1.shape[1], W3.shape[1]
    a1, a2, d1, d2 = (np.empty((n, h), f32) for _ in range(4))
    z3 = np.empty((n, k), f32)
    m1, m2 = np.empty((n, h), bool), np.empty((n, h), bool)
    grads = [(p, np.empty_like(p)) for p in params.values()]
    (_, gW1), (_, gb1), (_, gW2), (_, gb2), (_, gW3), (_, gb3) = grads
    at = np.arange(n) * k + t
    zero_row, step = np.zeros(h, f32), f32(lr)

    def step_():
        np.matmul(X, W1, out=a1), np.add(a1, b1, out=a1), np.maximum(a1, zero_row, out=a1)
        np.matmul(a1, W2, out=a2), np.add(a2, b2, out=a2), np.maximum(a2, zero_row, out=a2)
        np.matmul(a2, W3, out=z3), np.add(z3, b3, out=z3)
        top = np.maximum.reduce(z3.T.copy(), axis=0)[:, None]      # a row max, one vector pass
        np.subtract(z3, top, out=z3)
        shifted_at = z3.take(at)
        np.exp(z3, out=z3)
        total = np.add.reduce(z3, axis=1, keepdims=True)
        loss = np.add.reduce(np.log(total[:, 0]) - shifted_at) / n
        np.divide(z3, total, out=z3)
        z3.reshape(-1)[at] -= 1
        np.divide(z3, n, out=z3)
        np.add.reduce(z3, axis=0, out=gb3), np.matmul(a2.T, z3, out=gW3), np.matmul(z3, W3.T, out=d2)
        # where(a > 0, d, 0) as d's bits times the mask, as staticgrad's kernel does
        np.greater(a2, 0, out=m2), np.multiply(d2.view(i32), m2, out=d2.view(i32))
        np.add.reduce(d2, axis=0, out=gb2), np.matmul(a1.T, d2, out=gW2), np.matmul(d2, W2.T, out=d1)
        np.greater(a1, 0, out=m1), np.multiply(d1.view(i32), m1, out=d1.view(i32))
        np.add.reduce(d1, axis=0, out=gb1), np.matmul(X.T, d1, out=gW1)
        for p, g in grads:
            np.multiply(g, step, out=g), np.subtract(p, g, out=p)
        return loss
    return step_, params


def _transcendentals_of_c(data, cycles):
    x, h = data["x"], data["x"]
    inputs, pre = [], []
    for _ in range(cycles):
        a = np.sin(h) * workloads.CHAIN_SCALE + x
        inputs.append(h)
        pre.append(a)
        h = np.tanh(a)

    def transcendentals():
        for h_in, a in zip(inputs, pre):
            np.sin(h_in), np.tanh(a), np.cos(h_in)
    return transcendentals


def sincos_of_c(data, cycles):
    """(calls, outputs): the chain's sin and cos pairs from one complex exp each, and its tanh calls,
    with as few extra passes as that allows (the complex inputs are made once, outside the timing)."""
    x, h = data["x"], data["x"]
    inputs, pre = [], []
    for _ in range(cycles):
        a = np.sin(h) * workloads.CHAIN_SCALE + x
        inputs.append(1j * h)
        pre.append(a)
        h = np.tanh(a)
    pairs = [np.empty_like(z) for z in inputs]
    squashed = [np.empty_like(a) for a in pre]

    def transcendentals():
        for z, a, e, t in zip(inputs, pre, pairs, squashed):
            np.exp(z, out=e), np.tanh(a, out=t)       # e = cos(h) + i sin(h)
    return transcendentals, pairs


FLOORS = {"B": (("8 matrix products", _matmuls_of_b),
                ("leanest numpy step", lambda data: lean_step_of_b(data)[0])),
          "C": (("1,500 sin/cos/tanh calls", _transcendentals_of_c),
                ("1,000 complex exp/tanh calls", lambda data, cycles: sincos_of_c(data, cycles)[0])),
          "V1": cnn_floors.FLOORS}


def measure(rounds=25, target_s=0.05, names=tuple(FLOORS)) -> dict:
    out = {}
    for name in names:
        floors = FLOORS[name]
        w = workloads.get(name)
        data = workloads.make_data(w)
        args = (data, w.cycles) if name == "C" else (data,)
        fns = {"hand numpy": reference.prepare(w, data).call, "staticgrad": impl_staticgrad.prepare(w, data).call}
        fns.update((floor_name, make_floor(*args)) for floor_name, make_floor in floors)
        timings = time_interleaved(fns, rounds, target_s)
        hand = timings["hand numpy"]["median_s"]
        out[name] = {k: {"median_s": t["median_s"], "ratio": t["median_s"] / hand} for k, t in timings.items()}
    return out


def main(argv=None):
    import argparse
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floors", description=__doc__.split("\n\n")[0],
                                     epilog="One run of all of them takes about three minutes.")
    parser.add_argument("--only", default=",".join(FLOORS), metavar="B,C,V1", help="workloads (default: all)")
    argv = sys.argv[1:] if argv is None else list(argv)
    names = [n.strip().upper() for n in parser.parse_args(argv).only.split(",") if n.strip()]
    unknown = [n for n in names if n not in FLOORS]
    if unknown:
        parser.error(f"no floors for {', '.join(unknown)}; known: {', '.join(FLOORS)}")
    from .cli import CHILD_MARK, bench_env
    if CHILD_MARK not in os.environ:      # OpenBLAS reads its settings when numpy loads: start afresh
        os.execve(sys.executable, [sys.executable, "-m", "benchmarks.floors", *argv], bench_env(1))
    for name, rows in measure(names=names).items():
        print(f"{name}: " + ", ".join(f"{k} {r['median_s'] * 1e3:.2f} ms ({r['ratio']:.2f})" for k, r in rows.items()))


if __name__ == "__main__":
    main()
