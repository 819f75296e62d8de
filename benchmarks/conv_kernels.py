"""The convolution kernels on LeNet's two layers (float32), against torch and the bare matrix product each
needs: a measurement, not a test.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 .venv/bin/python -m benchmarks.conv_kernels

Rows: the forward (conv2d), the input gradient (conv_transpose2d, as the VJP builds it) and the weight
gradient (conv2d_weight) of x (64, 1, 28, 28) * w (8, 1, 3, 3) and x (64, 8, 14, 14) * w (16, 8, 3, 3), both
padding 1. Columns: staticgrad's kernel as a plan calls it (its patch layout chosen as usual), the same
with the row layout off (``exact``), torch (one thread; its autograd's kernels, aten.convolution_backward,
for the gradients), and the one GEMM of the same sizes on ready operands (the floor of an im2col kernel).
Times are medians (and minima) of ``--calls`` calls, in microseconds.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from staticgrad.ops import im2col

LAYERS = [("conv1 64x1x28x28 * 8x1x3x3", (64, 1, 28, 28), (8, 1, 3, 3)),
          ("conv2 64x8x14x14 * 16x8x3x3", (64, 8, 14, 14), (16, 8, 3, 3))]
ATTRS = {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1}


def timed(fn, calls):
    fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return np.median(times) * 1e6, np.min(times) * 1e6


def kernels(x, w, g):
    kh, kw = w.shape[2:]
    return {"forward": lambda: im2col.conv2d_kernel(x, w, **ATTRS),
            "input grad": lambda: im2col.conv_transpose2d_kernel(g, w, output_padding=(0, 0), **ATTRS),
            "weight grad": lambda: im2col.conv2d_weight_kernel(x, g, kernel=(kh, kw), **ATTRS)}


def gemms(x, w):
    """The product each kernel runs, on contiguous operands: (O, CKK) @ (CKK, N*L) and its two adjoints."""
    (n, c, h, wd), (o, _, kh, kw) = x.shape, w.shape
    depth, cols = c * kh * kw, n * h * wd
    a, b, gmat = w.reshape(o, depth).copy(), np.ones((depth, cols), x.dtype), np.ones((o, cols), x.dtype)
    at, bt = np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)
    return {"forward": lambda: a @ b, "input grad": lambda: at @ gmat, "weight grad": lambda: gmat @ bt}


def torch_kernels(x, w, g):
    import torch
    torch.set_num_threads(1)
    tx, tw, tg = (torch.from_numpy(v) for v in (x, w, g))

    def backward(mask):
        return lambda: torch.ops.aten.convolution_backward(tg, tx, tw, None, [1, 1], [1, 1], [1, 1], False, [0, 0],
                                                           1, mask)
    return {"forward": lambda: torch.nn.functional.conv2d(tx, tw, padding=1),
            "input grad": backward([True, False, False]), "weight grad": backward([False, True, False])}


def exact(fn):
    def run():
        im2col.ROWS = False
        try:
            return fn()
        finally:
            im2col.ROWS = True
    return run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args(argv)
    if os.environ.get("OPENBLAS_NUM_THREADS") != "1":
        print("note: OPENBLAS_NUM_THREADS is not 1: numpy's products may use several threads, torch's do not")
    rng = np.random.default_rng(0)
    print(f"{'layer':<30}{'kernel':<13}{'staticgrad':>16}{'exact':>16}{'torch':>16}{'bare GEMM':>16}")
    for name, xs, ws in LAYERS:
        x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
        g = rng.standard_normal((xs[0], ws[0]) + xs[2:]).astype(np.float32)
        ours, floor = kernels(x, w, g), gemms(x, w)
        try:
            theirs = torch_kernels(x, w, g)
        except ImportError:
            theirs = {}
        for kind, fn in ours.items():
            cells = [timed(f, args.calls) if f is not None else None
                     for f in (fn, exact(fn), theirs.get(kind), floor[kind])]
            print(f"{name:<30}{kind:<13}" + "".join(f"{'-':>16}" if c is None else f"{c[0]:>9.0f} ({c[1]:>4.0f})"
                                                    for c in cells))


if __name__ == "__main__":
    main()
