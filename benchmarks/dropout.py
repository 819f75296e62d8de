"""What dropout costs: its masks' bytes in a training step's memory plan, and their time.

``python -m benchmarks.dropout`` (from the repository; prefix ``env -u OPENBLAS_CORETYPE -u
OPENBLAS_L2_SIZE`` as for every benchmark). Three measures:

- an MLP 784-1024-1024-10 in float32 at batch 256 (and 2048), dropout p=0.5 after each hidden layer,
  one SGD step per call: the plan's peak bytes and the bytes held from the forward pass into the backward
  pass, with no dropout, with sg.dropout (a bool mask) and with a float mask of x's dtype;
- eight such layers of width 512: peak bytes and time a step with the masks held and drawn again in the
  backward pass (``Backend(recompute_draws=True)``);
- the kernels: one 256 x 1024 mask, the products with it, and the first layer's matrix product.
Times are the minimum over repeats; peak bytes are the memory plan's and do not vary.
"""
from __future__ import annotations

import time
import timeit

import numpy as np

import staticgrad as sg
from staticgrad import optim
from staticgrad.lower import Backend
from staticgrad.lower.memory import nbytes, storage_bases
from staticgrad.lower.shapes import at_sizes, concrete_shapes
from staticgrad.ops.random import random_bernoulli
from staticgrad.tensor import LEAVES


def _float_mask_dropout(x, p, key):
    return x * random_bernoulli(key, like=x, p=1 - p, dtype=x.dtype) * (1 / (1 - p))


def step(sizes, mask="bool", recompute=False, dtype="float32"):
    """A compiled SGD step of relu layers ``sizes`` with dropout (``mask``: "bool", "float" or "none")."""
    rng = np.random.default_rng(0)
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        params += [sg.parameter(rng.standard_normal((a, b)) * np.sqrt(2 / a), dtype=dtype),
                   sg.parameter(np.zeros(b), dtype=dtype)]
    key = sg.random.key(0)
    x = sg.placeholder((None, sizes[0]), dtype=dtype, name="x")
    t = sg.placeholder((None,), dtype="int64", name="t")
    h = x
    for k in range(len(sizes) - 2):
        h = sg.relu(h @ params[2 * k] + params[2 * k + 1])
        h = {"bool": lambda v: sg.dropout(v, 0.5, key=key), "float": lambda v: _float_mask_dropout(v, 0.5, key),
             "none": lambda v: v}[mask](h)
    loss = sg.softmax_cross_entropy(h @ params[-2] + params[-1], t)
    return sg.compile(loss, [x, t], updates=optim.SGD(params, lr=0.01).updates(loss),
                      backend=Backend(recompute_draws=recompute))


def held_into_backward(fn, feeds):
    """(bytes of values made in the forward pass and still needed when the backward pass starts, of which
    random draws), at these feeds' sizes."""
    ir = fn.ir
    shapes = concrete_shapes(ir, list(ir.nodes), [f.shape for f in feeds])
    graph, order = at_sizes(ir, list(ir.nodes), shapes)
    base, last = storage_bases(graph, order), {}
    for k, i in enumerate(order):
        for j in graph.nodes[i].inputs:
            last[base[j]] = k
    alive = {}
    for k, i in enumerate(order):
        node = graph.nodes[i]
        if node.role == "backward":
            break
        if node.op not in LEAVES and base[i] == i and last.get(i, -1) > k:
            alive[i] = (nbytes(shapes[i], node.dtype), node.op.startswith("random_"))
        alive = {j: v for j, v in alive.items() if last.get(j, -1) > k}
    return sum(b for b, _ in alive.values()), sum(b for b, draw in alive.values() if draw)


def feeds(batch, width):
    rng = np.random.default_rng(1)
    return rng.standard_normal((batch, width)).astype(np.float32), rng.integers(0, 10, batch)


def seconds(fn, args, repeats):
    fn(*args)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - start)
    return best


def kernels():
    key, shape = np.array([7.0, 3.0]), (256, 1024)
    rng = np.random.default_rng(0)
    x, a, w = (rng.standard_normal(s).astype(np.float32) for s in (shape, (256, 784), (784, 1024)))
    bits = sg.ops.REGISTRY["random_bernoulli"].kernel
    mask = bits(key, shape=shape, p=0.5, dtype=np.dtype(bool), index=0)
    floats, out = mask.astype(np.float32), np.empty_like(x)
    cases = {"a 256 x 1024 bool mask": lambda: bits(key, shape=shape, p=0.5, dtype=np.dtype(bool), index=0),
             "x * bool mask": lambda: np.multiply(x, mask, out=out),
             "x * float32 mask": lambda: np.multiply(x, floats, out=out),
             "256 x 784 @ 784 x 1024": lambda: a @ w}
    for name, fn in cases.items():
        print(f"  {name:24s} {min(timeit.repeat(fn, number=10, repeat=7)) / 10 * 1e6:9.1f} us")


def main():
    for batch in (256, 2048):
        args = feeds(batch, 784)
        for mask in ("none", "bool", "float"):
            fn = step([784, 1024, 1024, 10], mask)
            fn(*args)
            held, draws = held_into_backward(fn, args)
            print(f"MLP batch {batch} {mask:5s}: peak {fn.report().summary['peak_bytes']:,} B, held into the "
                  f"backward pass {held:,} B (masks {draws:,} B)")
    for batch in (512, 4096):
        args = feeds(batch, 256)
        for recompute in (False, True):
            fn = step([256] + [512] * 8 + [10], recompute=recompute)
            took = seconds(fn, args, 5)
            summary = fn.report().summary
            print(f"8 layers batch {batch} recompute_draws={recompute!s:5s}: peak {summary['peak_bytes']:,} B, "
                  f"{summary.get('recomputed_draws', 0)} masks drawn again, {took * 1e3:.1f} ms a step")
    print("kernels:")
    kernels()


if __name__ == "__main__":
    main()
