"""The hand-worked reverse-mode examples (docs/worked_examples.md), with staticgrad's numbers beside
the hand ones.

Each example is built as a graph, differentiated with sg.grad and compiled; the table prints the value
worked out by hand, staticgrad's value, and whether they agree to the digits the hand value gives.

    python examples/worked_examples.py
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import staticgrad as sg


def param(value, name, dtype="float64"):
    return sg.parameter(np.array(value, dtype=dtype), name=name)


def evaluate(outputs, feeds=None):
    """Compile ``outputs`` (no placeholders unless ``feeds`` gives them) and run once."""
    fn = sg.compile(list(outputs), inputs=list(feeds or {}))
    return [np.asarray(v) for v in fn(*(feeds or {}).values())]


def example1():
    u, v = param(5.0, "u"), param(7.0, "v")
    t1 = u * u
    t2 = t1 * u
    t4 = u * v
    t6 = v * v
    y = 2 * t2 + 3 * t4 + 4 * t6 + 5
    gu, gv = sg.grad(y, [u, v])
    # What each use sends back is (gradient at the use's result) x (the other factor).
    g1, g2, g4, g6 = sg.grad(y, [t1, t2, t4, t6])
    values = evaluate([y, gu, gv, g1 * u, g2 * t1, g4 * v, g6 * v, g4 * u])
    y_, gu_, gv_, uu, t1u, uv_u, vv, uv_v = values
    return [("y", "556", y_), ("dy/du = 6u^2 + 3v", "171", gu_), ("dy/dv = 3u + 8v", "71", gv_),
            ("u from each slot of u*u", "50", uu), ("u from t1*u", "50", t1u), ("u from u*v", "21", uv_u),
            ("v from each slot of v*v", "28", vv), ("v from u*v", "15", uv_v),
            ("sum of u's uses", "171", 2 * uu + t1u + uv_u), ("sum of v's uses", "71", 2 * vv + uv_v)]


def example2():
    rows = []
    for dtype, start in (("float64", (.4, .5, .6, .7, .8)), ("float32", (4, 5, 6, 7, 8))):
        x1 = sg.placeholder((), dtype=dtype, name="x1")
        x2 = sg.placeholder((), dtype=dtype, name="x2")
        u, v, d, w, b = (param(s, n, dtype) for s, n in zip(start, "uvdwb"))
        inner = sg.sigmoid(u * x1 + v * x2 + d)
        y = sg.sigmoid(w * inner + b)
        grads = sg.grad(y, [u, v, d, w, b])
        values = evaluate([inner, y] + grads, {x1: np.array(2, dtype), x2: np.array(3, dtype)})
        if dtype == "float64":
            hand = ["0.9478", "0.8121", "0.010562", "0.015843", "0.005281", "0.144655", "0.152615"]
            names = ["inner sigma", "y"] + [f"dy/d{n}" for n in "uvdwb"]
            rows += list(zip(names, hand, values))
        else:
            # sigma(29) rounds to 1 in float32, so sigma' = out * (1 - out) = 0: the inner gradient vanishes.
            rows += [("float32, u..b = 4..8: inner sigma(29)", "1", values[0]),
                     ("float32: dy/du (saturated)", "0", values[2]),
                     ("float32: dy/dd (saturated)", "0", values[4])]
    return rows


def example3():
    W = param([[.3, .6], [.4, .7], [.8, .1]], "W")
    b1 = param([.2, .5, .9], "b1")
    U = param([[.7, .2, .8], [.5, .4, .9]], "U")
    d = param([.2, .5], "d")
    v = param([.6, .8], "v")
    b = param(.3, "b")
    x = sg.placeholder((None, 2), name="x")
    y = sg.placeholder((None,), name="y")
    h = sg.sigmoid(x @ W.T + b1)
    z = h @ U.T + d
    y_hat = sg.sigmoid(z) @ v + b
    loss = sg.mean(sg.square(y_hat - y))
    gW, gb, gh, gz = sg.grad(loss, [W, b, h, z])
    X, Y = np.array([[3.0, 2.0], [0.5, 1.2]]), np.array([1.5, 0.9])
    feeds = {x: X, y: Y}
    yh, L, gW_, gb_, gh_, gz_ = evaluate([y_hat, loss, gW, gb, gh, gz], feeds)
    # One sample's share of the mean: its own squared error's gradient over the batch size 2.
    shares = [evaluate([gW, gb], {x: X[i:i + 1], y: Y[i:i + 1]}) for i in range(2)]
    U_ = U.value
    return [("y_hat (sample 1)", "1.5362", yh[0]), ("y_hat (sample 2)", "1.4915", yh[1]), ("L", "0.175595", L),
            ("dL/dw11 from sample 1", "0.00078", shares[0][0][0, 0] / 2),
            ("dL/dw11 from sample 2", "0.00595", shares[1][0][0, 0] / 2), ("dL/dw11", "0.006731", gW_[0, 0]),
            ("dL/db from sample 1", "0.0362", shares[0][1] / 2), ("dL/db from sample 2", "0.5915", shares[1][1] / 2),
            ("dL/db", "0.627673", gb_),
            ("h1 (sample 1) via unit 1", "0.00184", gz_[0, 0] * U_[0, 0]),
            ("h1 (sample 1) via unit 2", "0.00129", gz_[0, 1] * U_[1, 0]),
            ("dL/dh1 (sample 1, a fork)", "0.003131", gh_[0, 0])]


def example4():
    a, b, c = param(2.0, "a"), param(-3.0, "b"), param(10.0, "c")
    L = sg.square(sg.relu(a * b + c))
    return list(zip(["L", "dL/da", "dL/db", "dL/dc"], ["16", "-24", "16", "8"],
                    evaluate([L] + sg.grad(L, [a, b, c]))))


def example5():
    x, a = param(3.0, "x"), param(1.5, "a")
    y = x * x + x
    b = a + a
    gx, = sg.grad(y, [x])
    ga, = sg.grad(b, [a])
    return list(zip(["dy/dx = 2x + 1 at x=3", "d(a+a)/da"], ["7", "2"], evaluate([gx, ga])))


def example6():
    rows = []
    for form in ("tanh", "(e-1)/(e+1)"):
        x1, x2, w1, w2 = param(2.0, "x1"), param(0.0, "x2"), param(-3.0, "w1"), param(1.0, "w2")
        bias = param(6.8813735870195432, "b")
        n = x1 * w1 + x2 * w2 + bias
        if form == "tanh":
            o = sg.tanh(n)
        else:
            e = sg.exp(2 * n)           # e forks into numerator and denominator; their gradients sum
            o = (e - 1) / (e + 1)
        grads = sg.grad(o, [n, x1, w1, x2, w2])
        values = evaluate([n, o] + grads)
        names = ["n", "o", "do/dn = 1 - o^2", "do/dx1", "do/dw1", "do/dx2", "do/dw2"]
        hand = ["0.8814", "0.7071", "0.5", "-1.5", "1.0", "0.5", "0"]
        rows += [(f"{name}  [{form}]", h, val) for name, h, val in zip(names, hand, values)]
    return rows


def example7():
    x, y, w = param(2.0, "x"), param(3.0, "y"), param(4.0, "w")
    z = (x + y) * w
    return list(zip(["dz/dx", "dz/dy", "dz/dw"], ["4", "4", "5"], evaluate(sg.grad(z, [x, y, w]))))


EXAMPLES = [
    ("1. y = 2u^3 + 3uv + 4v^2 + 5 at u=5, v=7", example1),
    ("2. y = sigmoid(w * sigmoid(u x1 + v x2 + d) + b), x1=2, x2=3", example2),
    ("3. a 2-3-2-1 network, mean squared error over two samples", example3),
    ("4. L = relu(a b + c)^2 at a=2, b=-3, c=10", example4),
    ("5. forks: y = x x + x, b = a + a", example5),
    ("6. a tanh neuron, written two ways", example6),
    ("7. z = (x + y) w at x=2, y=3, w=4", example7),
]


def agrees(hand: str, ours) -> bool:
    """True when ``ours`` rounds to ``hand`` at the decimals the hand value was written with; a hand value
    written as a whole number is exact (0 for a vanished gradient means exactly 0)."""
    if "." not in hand:
        return abs(float(ours) - float(hand)) <= 1e-9 * max(1.0, abs(float(hand)))
    decimals = len(hand.split(".")[1])
    return abs(float(ours) - float(hand)) <= 0.5 * 10.0 ** -decimals + 1e-12


def main(argv=None):
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    results, failures = [], 0
    for title, build in EXAMPLES:
        print(title)
        print(f"   {'quantity':<40}{'by hand':>12}{'staticgrad':>16}")
        for name, hand, ours in build():
            ok = agrees(hand, ours)
            failures += not ok
            results.append((title, name, hand, float(ours), ok))
            print(f"   {name:<40}{hand:>12}{float(ours):>16.6f}  {'ok' if ok else 'MISMATCH'}")
        print()
    print(f"{len(results) - failures} of {len(results)} hand values reproduced")
    return results


if __name__ == "__main__":
    sys.exit(0 if all(r[-1] for r in main()) else 1)
