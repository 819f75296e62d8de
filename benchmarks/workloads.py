"""The benchmark workloads: what each computes and the seeded data it runs on.

Only numpy here, so every implementation (staticgrad, the hand-written reference, torch, jax, pytensor,
each possibly in another virtual environment) builds its version from the same definitions and data.

A  the 2-3-2-1 sigmoid network of docs/worked_examples.md example 3: its 20 parameters, its 2 samples,
   mean squared error; outputs the loss and the gradients of all 20 parameters (float64).
B  a 784-256-256-10 ReLU MLP, batch 128, float32: softmax cross-entropy, forward + backward + an SGD
   update of the 6 parameter arrays; outputs the loss (the new parameters are checked too).
C  an elementwise chain of 2000 ops on 1000 float64 numbers, gradient of its sum w.r.t. the input.
D  the same chain with 200 ops on 10 numbers (overhead-bound).
E  an almost empty function, ``x + 1.0`` on one number: the fixed cost of one call.
R1 a tanh RNN, h_t = tanh(x_t @ Wx + h_{t-1} @ Wh + b) from h_0 = 0: input 32, hidden 128, 50 steps,
   batch 32 (issue 19). Loss 0.5 * mean over t, b, j of h_t[b, j]**2, so that every step's output feeds
   the loss and back-propagation through time carries a gradient in from each step; outputs the loss
   and the gradients of Wx, Wh and b (float64, so that gradients agree to 1e-9 across implementations).
R2 the same RNN with hidden 64, 1,000 steps, batch 8 (loop-overhead bound; where checkpointing pays).
V1 a LeNet-style convolutional net (issue 20), float32: 64 images 1x28x28, conv 3x3 1->8 pad 1, ReLU, max
   pool 2, conv 3x3 8->16 pad 1, ReLU, max pool 2, flatten (NCHW order) to 784, linear 784->10, softmax
   cross-entropy; outputs the loss and the gradients of the 6 parameter arrays.
Compile-cost graphs: the same chain with 1,000 and 100,000 ops on 10 numbers.

The chain repeats a 4-op cycle, ``h = tanh(sin(h) * 0.9 + x)``, starting from h = x, then sums h: a
transcendental, a product with a constant, a sum with the input (so x forks into every cycle and its
gradient sums 1 + cycles terms) and a squashing op. With x uniform in (-0.2, 0.2), h stays in (-0.62,
0.62) and the reverse sweep shrinks by 0.45 to 0.9 per cycle: at 2000 ops the smallest adjoint is about
1e-171, a normal float (denormals would slow every implementation down and blur the comparison).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np

SEED = 20240604
CHAIN_CYCLE = ("sin", "mul 0.9", "add x", "tanh")   # documentation of the cycle every impl writes out
CHAIN_SCALE = 0.9
CHAIN_X_RANGE = 0.2
B_SIZES = (784, 256, 256, 10)
B_BATCH = 128
B_LR = 0.01
CNN_PARAM_NAMES = ("w1", "b1", "w2", "b2", "w3", "b3")


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    kind: str                     # "mlp_small" | "mlp_sgd" | "chain" | "empty" | "rnn" | "cnn"
    dtype: str = "float64"
    size: int = 0                 # chain length of the data vector
    ops: int = 0                  # chain: number of elementwise ops (4 per cycle)
    rtol: float = 1e-9            # normwise relative error allowed against the numpy reference
    params: dict = field(default_factory=dict)

    @property
    def cycles(self) -> int:
        return self.ops // len(CHAIN_CYCLE)


WORKLOADS = {
    "A": Workload("A", "2-3-2-1 sigmoid net, 20 params, 2 samples, loss+grads", "mlp_small"),
    "B": Workload("B", "784-256-256-10 ReLU MLP SGD step, batch 128, f32", "mlp_sgd", dtype="float32",
                  rtol=2e-4),
    "C": Workload("C", "2000-op elementwise chain, 1000 floats, grad", "chain", size=1000, ops=2000),
    "D": Workload("D", "200-op elementwise chain, 10 floats, grad", "chain", size=10, ops=200),
    "E": Workload("E", "x + 1.0 on 1 float: fixed call overhead", "empty", size=1),
}


def rnn_workload(name, inputs, hidden, steps, batch, variants=()) -> Workload:
    """A tanh RNN workload (R1, R2, or a tiny one for tests). ``variants`` lists option sets of
    staticgrad's version (benchmarks/impl_staticgrad.py: ``checkpoint``, ``loss_in_carry``) measured beside
    it. Peak memory is measured for these workloads."""
    title = f"tanh RNN {inputs}->{hidden}, {steps:,} steps, batch {batch}, loss+grads"
    return Workload(name, title, "rnn", params={"inputs": inputs, "hidden": hidden, "steps": steps, "batch": batch,
                                                "variants": tuple(variants), "memory": True})


WORKLOADS["R1"] = rnn_workload("R1", 32, 128, 50, 32)
# Checkpointing (issue 19's goal: under a quarter of the stored-everything peak), once as the peers write
# the loss (of all the stacked h's, which must then exist whatever is checkpointed) and once with the loss
# summed in the carry, with its own stored-everything run beside it.
WORKLOADS["R2"] = rnn_workload("R2", 32, 64, 1000, 8, variants=(
    {"checkpoint": 32}, {"loss_in_carry": True}, {"loss_in_carry": True, "checkpoint": 32}))


def cnn_workload(name, batch=64, size=28, channels=(1, 8, 16), classes=10) -> Workload:
    """The LeNet-style net of V1 (or a smaller one for tests): two blocks of conv 3x3 pad 1, ReLU and
    max pool 2, then a linear layer on the NCHW-flattened maps, softmax cross-entropy. ``size`` must be a
    multiple of 4 (two halvings)."""
    if size % 4:
        raise ValueError(f"cnn workload: size must be a multiple of 4, got {size}")
    c0, c1, c2 = channels
    features = c2 * (size // 4) ** 2
    title = (f"CNN conv{c0}->{c1}, pool, conv{c1}->{c2}, pool, linear {features}->{classes}, "
             f"{batch}x{c0}x{size}x{size}, f32, loss+grads")
    # float32: sums over up to 50,176 products per gradient entry agree to a few 1e-6 across libraries
    return Workload(name, title, "cnn", dtype="float32", rtol=1e-4,
                    params={"batch": batch, "size": size, "channels": tuple(channels), "classes": classes})


WORKLOADS["V1"] = cnn_workload("V1")


def compile_cost_workload(ops: int) -> Workload:
    """The chain of ``ops`` elementwise ops on 10 numbers, used to measure one-time costs."""
    if ops <= 0 or ops % len(CHAIN_CYCLE):
        raise ValueError(f"compile-cost chain: ops must be a positive multiple of {len(CHAIN_CYCLE)}, got {ops}")
    return Workload(f"chain{ops}", f"{ops:,}-op elementwise chain, 10 floats, grad", "chain",
                    size=10, ops=ops)


def get(name: str) -> Workload:
    if name in WORKLOADS:
        return WORKLOADS[name]
    if name.startswith("chain") and name[5:].isdigit():
        return compile_cost_workload(int(name[5:]))
    raise ValueError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)} or chainN")


# ------------------------------------------------------------------ data
def example3_parameters():
    """docs/worked_examples.md example 3, as arrays: W (3x2, row j = unit j's weights), b1, U (2x3), d, v, b."""
    W = np.array([[.3, .6], [.4, .7], [.8, .1]])
    b1 = np.array([.2, .5, .9])
    U = np.array([[.7, .2, .8], [.5, .4, .9]])
    d = np.array([.2, .5])
    v = np.array([.6, .8])
    b = np.array(.3)
    return {"W": W, "b1": b1, "U": U, "d": d, "v": v, "b": b}


A_PARAM_NAMES = ("W", "b1", "U", "d", "v", "b")
RNN_PARAM_NAMES = ("Wx", "Wh", "b")
B_PARAM_NAMES = ("W1", "b1", "W2", "b2", "W3", "b3")
A_EXPECTED_LOSS = 0.175595          # hand-computed in docs/worked_examples.md
A_EXPECTED_GRADS = {("W", (0, 0)): 0.006731, ("b", ()): 0.627673}


def make_data(workload: Workload) -> dict:
    """Fresh arrays (inputs and initial parameters) for ``workload``; the same on every call and machine."""
    rng = np.random.default_rng(SEED)
    if workload.kind == "mlp_small":
        data = example3_parameters()
        data["X"] = np.array([[3.0, 2.0], [0.5, 1.2]])
        data["y"] = np.array([1.5, 0.9])
        return data
    if workload.kind == "mlp_sgd":
        f32 = np.float32
        data = {"X": rng.standard_normal((B_BATCH, B_SIZES[0])).astype(f32),
                "t": rng.integers(0, B_SIZES[-1], size=B_BATCH).astype(np.int64)}
        for k, (m, n) in enumerate(zip(B_SIZES[:-1], B_SIZES[1:]), 1):
            data[f"W{k}"] = (rng.standard_normal((m, n)) * np.sqrt(2.0 / m)).astype(f32)
            data[f"b{k}"] = (rng.standard_normal(n) * 0.01).astype(f32)
        return data
    if workload.kind in ("chain", "empty"):
        return {"x": rng.uniform(-CHAIN_X_RANGE, CHAIN_X_RANGE, size=workload.size)}
    if workload.kind == "rnn":
        return rnn_data(rng, **{k: workload.params[k] for k in ("inputs", "hidden", "steps", "batch")})
    if workload.kind == "cnn":
        return cnn_data(rng, **workload.params)
    raise ValueError(f"unknown workload kind {workload.kind!r}")


def rnn_data(rng, inputs, hidden, steps, batch) -> dict:
    """X (steps, batch, inputs) and the parameters Wx (inputs, hidden), Wh (hidden, hidden), b (hidden,).

    Weights scaled by 1/sqrt(fan-in) keep x @ Wx and h @ Wh of order 1: tanh works in its curved range
    (in R2 the mean |h| is 0.61, 3% of them beyond 0.99). One step's output reaches back some tens of
    steps before its share of the gradient fades (1e-5 after 30 steps); each step's adjoint sums the
    shares of all later steps, so it stays of the loss's scale (no denormals)."""
    return {"X": rng.standard_normal((steps, batch, inputs)),
            "Wx": rng.standard_normal((inputs, hidden)) / np.sqrt(inputs),
            "Wh": rng.standard_normal((hidden, hidden)) / np.sqrt(hidden),
            "b": rng.standard_normal(hidden) * 0.1}


def cnn_data(rng, batch, size, channels, classes) -> dict:
    """X (batch, c0, size, size) float32 images, t (batch,) int64 labels, and the parameters in torch's
    layouts: w1 (c1, c0, 3, 3), b1 (c1,), w2 (c2, c1, 3, 3), b2 (c2,); the linear layer as B's, w3
    (features, classes) applied as flat @ w3, b3 (classes,). Weights scaled by sqrt(2 / fan-in) (He), so
    that about half of each ReLU's inputs are positive and the activations stay of order 1."""
    f32 = np.float32
    c0, c1, c2 = channels
    features = c2 * (size // 4) ** 2
    return {"X": rng.standard_normal((batch, c0, size, size)).astype(f32),
            "t": rng.integers(0, classes, size=batch).astype(np.int64),
            "w1": (rng.standard_normal((c1, c0, 3, 3)) * np.sqrt(2.0 / (c0 * 9))).astype(f32),
            "b1": (rng.standard_normal(c1) * 0.1).astype(f32),
            "w2": (rng.standard_normal((c2, c1, 3, 3)) * np.sqrt(2.0 / (c1 * 9))).astype(f32),
            "b2": (rng.standard_normal(c2) * 0.1).astype(f32),
            "w3": (rng.standard_normal((features, classes)) * np.sqrt(2.0 / features)).astype(f32),
            "b3": (rng.standard_normal(classes) * 0.1).astype(f32)}


def _now():
    """(CPU seconds of this process and of its finished children, such as C compilers; wall seconds)."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system, time.perf_counter()


class Stopwatch:
    """One-time costs: each ``lap(name)`` records the time since the previous mark on both clocks."""

    def __init__(self):
        self.laps = {}
        self._last = _now()

    def lap(self, name):
        now = _now()
        self.laps[name] = (now[0] - self._last[0], now[1] - self._last[1])
        self._last = now

    def skip(self):
        """Start the next lap now (what happened since the last mark is not a cost)."""
        self._last = _now()

    def costs(self, clock="cpu") -> dict:
        k = 0 if clock == "cpu" else 1
        return {name: span[k] for name, span in self.laps.items()}


@dataclass
class Prepared:
    """One implementation of one workload, ready to time.

    ``call()`` runs one step (what is timed); ``check()`` returns the outputs compared across
    implementations (for B: the loss and each parameter's change after one step from the initial values;
    the parameters are restored afterwards); ``stopwatch`` holds the one-time costs. For peak memory
    (benchmarks/memory.py): ``traced`` says that tracemalloc sees the implementation's arrays (numpy's
    do; torch's, XLA's and numba's do not), ``held()``, if given, the bytes of arrays it keeps from one
    call to the next (a workspace), which a call's own peak does not show, and ``reported_peak`` the
    implementation's own account of one call's buffers, where it has one (XLA's buffer assignment).
    """
    impl: str
    call: object
    check: object
    stopwatch: Stopwatch | None = None
    notes: dict = field(default_factory=dict)
    traced: bool = False
    held: object = None
    reported_peak: int | None = None


def sgd_step_check(data, step, get, put):
    """B's check: one SGD ``step`` (returning the loss) from the initial parameters of ``data``; returns
    [loss] + each parameter's change. ``get()`` returns the parameters as arrays in B_PARAM_NAMES order and
    ``put(arrays)`` sets them (it receives copies it may keep). The initial values are put back afterwards,
    so every implementation is timed from the same parameters."""
    initial = [data[k] for k in B_PARAM_NAMES]
    put([v.copy() for v in initial])
    loss = step()
    deltas = [np.asarray(new) - old for new, old in zip(get(), initial)]
    put([v.copy() for v in initial])
    return [loss] + deltas


def outputs_close(got, want, rtol):
    """(ok, worst error) comparing two lists of arrays by normwise relative error, array by array."""
    if len(got) != len(want):
        return False, float("inf")
    worst = 0.0
    for g, w in zip(got, want):
        g, w = np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64)
        if g.shape != w.shape or not np.all(np.isfinite(g)):
            return False, float("inf")
        scale = float(np.max(np.abs(w))) if w.size else 0.0
        err = float(np.max(np.abs(g - w))) / scale if scale > 0 else float(np.max(np.abs(g), initial=0.0))
        worst = max(worst, err)
    return worst <= rtol, worst
