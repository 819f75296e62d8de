"""Where B and C stop: the share of the hand-written step taken by calls any numpy implementation makes too.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python -m benchmarks.floors

B: the eight matrix products of the SGD step alone (the shapes and operand layouts of benchmarks/reference.py,
float32). C: the 1,500 sin, cos and tanh calls of the 2000-op chain alone, on the chain's own values. Each is
timed in interleaved rounds with the hand-written step and staticgrad's compiled step, one BLAS thread, CPU
time, medians (benchmarks/measure.py); what is printed is every median over the hand-written one.
"""
from __future__ import annotations

import os
import sys

import numpy as np

from . import impl_staticgrad, reference, workloads
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


def measure(rounds=25, target_s=0.05) -> dict:
    out = {}
    for name, floor_name, make_floor in (("B", "8 matrix products", _matmuls_of_b),
                                         ("C", "1,500 sin/cos/tanh calls", _transcendentals_of_c)):
        w = workloads.get(name)
        data = workloads.make_data(w)
        args = (data,) if name == "B" else (data, w.cycles)
        fns = {"hand numpy": reference.prepare(w, data).call, "staticgrad": impl_staticgrad.prepare(w, data).call,
               floor_name: make_floor(*args)}
        timings = time_interleaved(fns, rounds, target_s)
        hand = timings["hand numpy"]["median_s"]
        out[name] = {k: {"median_s": t["median_s"], "ratio": t["median_s"] / hand} for k, t in timings.items()}
    return out


def main():
    from staticgrad.bench import CHILD_MARK, bench_env
    if CHILD_MARK not in os.environ:      # OpenBLAS reads its settings when numpy loads: start afresh
        os.execve(sys.executable, [sys.executable, "-m", "benchmarks.floors"], bench_env(1))
    for name, rows in measure().items():
        print(f"{name}: " + ", ".join(f"{k} {r['median_s'] * 1e3:.2f} ms ({r['ratio']:.2f})" for k, r in rows.items()))


if __name__ == "__main__":
    main()
